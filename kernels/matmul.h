// Matrix products of a weight matrix (any DType) with f32 activations.
#ifndef PDSERVE_KERNELS_MATMUL_H_
#define PDSERVE_KERNELS_MATMUL_H_

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/thread_pool.h"

namespace pdserve {

// A read-only view of a row-major weight matrix W[rows][cols] stored as
// `type`: row r starts at data + r * row_bytes. Does not own the memory (it
// usually points into a memory-mapped model file). cols is a multiple of the
// block size for quantized types.
struct WeightView {
  DType type = DType::kF32;
  int64_t rows = 0;       // output features
  int64_t cols = 0;       // input features
  int64_t row_bytes = 0;  // bytes between consecutive rows
  const void* data = nullptr;

  bool empty() const { return data == nullptr; }
  const uint8_t* row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + r * row_bytes;
  }
};

// Computes y[t][o] = sum_i W[o][i] * x[t][i] for t < n_tokens, o < W.rows.
// x rows are x_stride floats apart, y rows y_stride floats apart; x and y must
// not overlap. This is a real GEMM for n_tokens > 1: each weight block is read
// from memory once per call and applied to tiles of tokens held in registers.
// Threads of `pool` split the output rows (never the reduction). The SIMD
// level is chosen once at run time (AVX-512 VNNI, AVX2+FMA+F16C, scalar);
// the environment variable PDSERVE_ISA=scalar|avx2|avx512 can lower it.
//
// Quantized weights (Q8_0/Q4_0/Q4_1) quantize each token's activations to
// 8-bit blocks of 32 with an f32 scale (GGML's Q8_0/Q8_1) and use exact
// integer dot products per block; results then differ from the f32 product by
// that rounding: at most sum over blocks of sum|w| * amax(x_block) / 254.
//
// Batch invariance: y[t][o] is bitwise identical whatever n_tokens is, where
// token t sits in the batch, and how many threads the pool has (for a given
// SIMD level). Steady-state calls do not allocate: the activation scratch
// grows once per calling thread and is reused.
void MatMul(const WeightView& w, const float* x, int64_t x_stride,
            int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool);

// Scalar reference for tests: dequantizes each row and accumulates in double.
void MatMulReference(const WeightView& w, const float* x, int64_t x_stride,
                     int64_t n_tokens, float* y, int64_t y_stride);

// The instruction set the dispatcher selected: "avx512", "avx2", "scalar".
const char* MatMulIsa();

}  // namespace pdserve

#endif  // PDSERVE_KERNELS_MATMUL_H_
