// Tiled ("flash") attention over a 16-bit or 8-bit KV cache (KvDType f16,
// bf16, q8_0; f32 too), reading the cache's own layout directly. Internal to
// engine/model: ForwardPass and attention.cc call it through AttendBlock and
// the split-context entry points below.
//
// Arithmetic, fixed for every query (and so the same whatever block, split
// or SIMD level computes it; each level is bitwise equal to the scalar
// reference AttendTiledReference):
//   q' = q * (1 / sqrt(head_dim)); keys are taken in segments of
//   kAttnSegmentKeys positions from position 0, a segment in tiles of 16;
//   score_j = (sum over even d of q'_d k_jd) + (sum over odd d), each sum in
//   ascending d; per segment an online softmax from (m = -inf, l = 0, o = 0):
//   per tile m' = max(m, max_j score_j); when m' > m, l *= e^(m - m') and
//   o *= e^(m - m'); p_j = e^(score_j - m'); l += the pairwise sum of the 16
//   lanes of p (masked lanes 0); o += p_j v_j for j ascending. Segments are
//   merged in order into (M, L, O) from (-inf, 0, 0): M' = max(M, m),
//   L = L a + l b, O = O a + o b, a = e^(M - M'), b = e^(m - M'). Output
//   O * (1 / L). e^x is AttnExp (a Cephes-style polynomial; 0 below -87).
// bf16 (the CPU default) takes its softmax steps per block of 64 keys (4
// tiles: m' over the block, l += the pairwise sum of the lane-wise
// (t0 + t1) + (t2 + t3) of the rounded p) and multiplies in bf16 pairs, the
// operands of vdpbf16ps: q' and p are rounded to bf16 (RNE), and
// the score sums A (pairs of d = 0-1, 4-5, ...) and B (2-3, 6-7, ...) each
// step (acc + q'_odd k_odd) + q'_even k_even; o steps over slot pairs
// (o + p_odd v_odd) + p_even v_even. CPUs without AVX512-BF16 do the same
// in f32 (bf16 products are exact in f32): bitwise equal.
#ifndef PDSERVE_ENGINE_MODEL_ATTENTION_TILED_H_
#define PDSERVE_ENGINE_MODEL_ATTENTION_TILED_H_

#include <cstdint>

#include "engine/model/attention.h"

namespace pdserve {

// Keys per segment: the unit of the split over the context.
inline constexpr int64_t kAttnSegmentKeys = 1024;
// Query rows one tiled pass holds at once (larger blocks are processed in
// pieces of this many rows).
inline constexpr int64_t kAttnTiledRows = 16;
// The SIMD kernels take head dimensions that are multiples of 16 up to this;
// others run the scalar reference.
inline constexpr int64_t kAttnMaxHeadDim = 256;
bool AttendTiledVectorized(int64_t head_dim);

// Floats of one partial record: m, l, then head_dim floats of o.
inline int64_t AttnPartialFloats(int64_t head_dim) { return head_dim + 2; }
// Segments covering `n_keys` positions.
inline int64_t AttnSegments(int64_t n_keys) {
  return (n_keys + kAttnSegmentKeys - 1) / kAttnSegmentKeys;
}
// Scratch floats AttendTiled needs for `group` query heads per kv head.
int64_t AttendTiledScratchFloats(int64_t head_dim, int64_t group);

// The instruction set level the tiled kernels run with ("avx512", "avx2",
// "generic"); follows the matmul dispatcher (PDSERVE_ISA lowers it).
const char* AttendTiledIsa();

// Full attention of the block (writes b.out), tiled.
void AttendTiled(const AttentionBlock& b, float* scratch);

// Split over the context: for each query (row r in [row_begin, row_end),
// head g of the group; index q = (r - row_begin) * group + g) and each
// segment s in [seg_begin, seg_end) that the query reaches, writes the
// segment's (m, l, o) record to partials + (q * partial_stride + s) *
// AttnPartialFloats(head_dim). Segments a query does not reach are left
// alone.
void AttendTiledPartial(const AttentionBlock& b, int64_t seg_begin,
                        int64_t seg_end, float* partials,
                        int64_t partial_stride, float* scratch);
// Merges each query's records 0 .. AttnSegments(its keys) - 1 in order and
// writes b.out: bitwise the result of AttendTiled.
void CombineAttnPartials(const AttentionBlock& b, const float* partials,
                         int64_t partial_stride);

// The scalar reference of the arithmetic above, one query at a time, from
// KvStorage::ReadKey/ReadValue (tests).
void AttendTiledReference(const AttentionBlock& b);

namespace attn_internal {
// One SIMD level's kernels (attention_tiled_impl.h).
struct TiledKernels {
  void (*attend)(const AttentionBlock&, int64_t, int64_t, float*, int64_t,
                 float*);
  const char* name;
};
TiledKernels Avx512Bf16Kernels();
TiledKernels Avx512Kernels();
TiledKernels Avx2Kernels();
TiledKernels GenericKernels();
// The kernels of one level by name, or the selected ones for nullptr; tests
// run every level the CPU has. nullptr result: that level is unavailable.
const TiledKernels* KernelsFor(const char* isa);
float AttnExp(float x);
}  // namespace attn_internal

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_MODEL_ATTENTION_TILED_H_
