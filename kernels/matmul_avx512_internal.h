// Internal to the AVX-512 kernels (matmul_avx512.cc, _lanes.cc, _gemm.cc):
// constants, the prepared-activation layout and helpers both files share.
// Only include from translation units compiled with the AVX-512 flags.
#ifndef PDSERVE_KERNELS_MATMUL_AVX512_INTERNAL_H_
#define PDSERVE_KERNELS_MATMUL_AVX512_INTERNAL_H_

#include <immintrin.h>

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/matmul_internal.h"

namespace pdserve::kernels_internal::avx512 {

constexpr int kRowTile = 4;  // at most 4: rows sit in xmm lanes
// From this many tokens on, quantized products use the token-lane kernel
// (below it the weight unpacking costs more than it saves).
constexpr int64_t kLaneMinTokens = 5;
constexpr int kLanes = 16;
// Token-lane activations per (16-token group, block): 8 vectors of 16 tokens
// x 4 u8 values, then d_x for the 16 tokens, then d_x * sum(q) (Q4_1).
constexpr int64_t kLaneBlockBytes = 8 * 64 + 64 + 64;

// Lanes [0, left) of a 16-lane vector (all of them from 16 on).
inline __mmask16 TailMask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff)
                    : static_cast<__mmask16>((1u << left) - 1);
}

// 16 values of a float weight row (F32, F16, BF16) from column i as f32;
// lanes past `mask` are 0.
template <DType kType>
inline __m512 LoadFloatRow16(const uint8_t* row, int64_t i, __mmask16 mask) {
  if constexpr (kType == DType::kF32) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + i);
  } else if constexpr (kType == DType::kF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
        mask, reinterpret_cast<const uint16_t*>(row) + i));
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(
        mask, reinterpret_cast<const uint16_t*>(row) + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// The prepared activations of one MatMul call.
struct Layout {
  int64_t row_bytes;    // weight row stride
  int64_t nb;           // blocks per row
  int64_t np;           // block pairs per row (nb rounded up / 2)
  int64_t tok_bytes;    // bytes per token
  int64_t ntp;          // tokens rounded up to 16 (Q4_1 sum table stride)
  int64_t sums_offset;  // byte offset of the Q4_1 sum table (after tokens)
  bool lanes;           // token-lane layout (n_tokens >= kLaneMinTokens)
};

inline Layout MakeLayout(DType type, int64_t cols, int64_t n_tokens) {
  Layout l;
  l.row_bytes = 0;
  l.nb = cols / 32;
  l.np = (l.nb + 1) / 2;
  l.ntp = (n_tokens + 15) / 16 * 16;
  l.lanes = n_tokens >= kLaneMinTokens;
  if (l.lanes) {
    l.tok_bytes = l.nb * kLaneBlockBytes;  // per group of 16 tokens
    l.sums_offset = l.tok_bytes * (l.ntp / kLanes);
  } else {
    l.tok_bytes = l.np * (type == DType::kQ4_0 ? 192 : 128);
    l.sums_offset = l.tok_bytes * n_tokens;
  }
  return l;
}

// QuantizeActBlock, vectorised (bitwise the same: max |x|, amax / 127, 1 / d,
// x * (1 / d) rounded to nearest even): values 0..15 and 16..31 as int8 in
// lo / hi, d and the sum of q.
struct ActBlock {
  __m128i lo, hi;
  float d;
  int32_t sum;
};

inline ActBlock QuantizeBlock(const float* x) {
  const __m512 x0 = _mm512_loadu_ps(x);
  const __m512 x1 = _mm512_loadu_ps(x + 16);
  const float amax =
      _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
  ActBlock blk;
  blk.d = amax / 127.0f;
  const __m512 inv = _mm512_set1_ps(blk.d != 0.0f ? 1.0f / blk.d : 0.0f);
  const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, inv));
  const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, inv));
  blk.lo = _mm512_cvtepi32_epi8(q0);
  blk.hi = _mm512_cvtepi32_epi8(q1);
  blk.sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  return blk;
}

inline float Half(uint16_t h) { return _cvtsh_ss(h); }

// Sum of the 16 lanes of v in a fixed tree (lanes i + i+8, then + i+4, then
// + i+2, then + i+1), the order every float-weight kernel reduces in; the
// GEMM (matmul_avx512_gemm.cc) reproduces it lane-wise.
inline float ReduceAdd16(__m512 v) {
  const __m256 a = _mm256_add_ps(
      _mm512_castps512_ps256(v),
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  const __m128 b =
      _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

// Float weights (F32/F16/BF16): from this many tokens on, all tokens go
// through the GEMM kernel (bitwise the same results as the
// mat-vec tiles, only faster).
constexpr int64_t kGemmMinTokens = 24;

// How many leading tokens (all of them, or 0) FloatGemmRows computes for a
// call with n_tokens tokens; the caller does the rest.
int64_t FloatGemmTokens(int64_t n_tokens);

// Rows [row_begin, row_end) of a float-weight product for tokens
// [0, FloatGemmTokens(a.n_tokens)) (matmul_avx512_gemm.cc).
void FloatGemmRows(const MatMulArgs& a, int64_t row_begin, int64_t row_end);
// Grows the calling thread's GEMM buffer for matrices of `cols` columns (at
// least a full chunk of panels and the tokens of 4,096 columns), so a later
// FloatGemmRows on this thread does not allocate.
void ReserveGemmBuffer(int64_t cols);

template <DType kType>
constexpr int64_t kBlockBytes = kType == DType::kQ8_0   ? sizeof(BlockQ8_0)
                                : kType == DType::kQ4_0 ? sizeof(BlockQ4_0)
                                                        : sizeof(BlockQ4_1);

// Token-lane preparation of tokens [t_begin, t_end) (matmul_avx512_lanes.cc).
void PrepareLanes(const Layout& l, const float* x, int64_t x_stride,
                  int64_t n_tokens, int64_t t_begin, int64_t t_end,
                  uint8_t* xq);

// Rows [row_begin, row_end) of a quantized product, all tokens, with the
// token-lane kernel (l.lanes must be set; l.row_bytes unused).
void LaneRows(DType type, const MatMulArgs& a, const Layout& l,
              int64_t row_begin, int64_t row_end);

}  // namespace pdserve::kernels_internal::avx512

#endif  // PDSERVE_KERNELS_MATMUL_AVX512_INTERNAL_H_
