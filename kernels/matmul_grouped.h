// Several independent matrix products computed in one parallel region (the
// experts of a mixture-of-experts layer: each expert's weights applied to the
// few tokens routed to it).
#ifndef PDSERVE_KERNELS_MATMUL_GROUPED_H_
#define PDSERVE_KERNELS_MATMUL_GROUPED_H_

#include <cstdint>

#include "absl/types/span.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"

namespace pdserve {

// One product of a grouped MatMul, with MatMul's meaning:
// y[t][o] = sum_i w[o][i] * x[t][i] for t < n_tokens, o < w.rows; x rows are
// x_stride floats apart, y rows y_stride floats apart. n_tokens may be 0 (the
// group is skipped). Does not own w's data, x or y.
struct MatMulGroup {
  WeightView w;
  const float* x = nullptr;
  int64_t x_stride = 0;
  int64_t n_tokens = 0;
  float* y = nullptr;
  int64_t y_stride = 0;
};

// Computes every group's product, writing bitwise the same values as
// MatMul(g.w, g.x, g.x_stride, g.n_tokens, g.y, g.y_stride, pool) for each g
// (so MatMul's batch invariance carries over), but in one parallel region:
// the (group, block of output rows) work items of all groups are claimed
// dynamically by the pool's threads, instead of one region per product.
// Each group's weights are read once per call. Groups must not write to any
// group's x, and their y must not overlap.
//
// Quantized weights: each group's activations are quantized once; a group
// whose (x, x_stride, n_tokens, w.type, w.cols) equal those of the previous
// quantized group reuses its prepared activations (put products of the same
// input, e.g. an expert's gate and up, next to each other).
//
// Steady-state calls do not allocate: scratch grows once per calling thread
// (to the largest call seen) and is reused. Same threading rules as MatMul
// (one call at a time per pool).
void MatMulGrouped(absl::Span<const MatMulGroup> groups, ThreadPool& pool);

namespace kernels_internal {

struct IsaKernels;

// MatMulGrouped with an explicit kernel set (tests compare every SIMD level
// against MatMulWith).
void MatMulGroupedWith(const IsaKernels& k,
                       absl::Span<const MatMulGroup> groups, ThreadPool& pool);

}  // namespace kernels_internal
}  // namespace pdserve

#endif  // PDSERVE_KERNELS_MATMUL_GROUPED_H_
