// Internal to the AVX2 kernels (matmul_avx2.cc, matmul_avx2_packed.cc):
// helpers both files share. Only include from translation units compiled
// with the AVX2 flags (-mavx2 -mfma -mf16c).
#ifndef PDSERVE_KERNELS_MATMUL_AVX2_INTERNAL_H_
#define PDSERVE_KERNELS_MATMUL_AVX2_INTERNAL_H_

#include <immintrin.h>

#include <cstdint>

namespace pdserve::kernels_internal::avx2 {

inline float Half(uint16_t h) { return _cvtsh_ss(h); }

// Sum of the 8 lanes (fixed order).
inline float HSum(__m256 v) {
  const __m128 h =
      _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

// QuantizeActBlock, vectorised (bitwise the same): writes 32 int8 to q and
// returns d; *sum receives the sum of q.
inline float QuantizeBlock(const float* x, int8_t* q, int32_t* sum) {
  __m256 v[4];
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 amax = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    amax = _mm256_max_ps(amax, _mm256_and_ps(v[k], abs_mask));
  }
  __m128 m =
      _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float d = _mm_cvtss_f32(m) / 127.0f;
  const __m256 inv = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
  __m256i qi[4];
  __m256i total = _mm256_setzero_si256();
  for (int k = 0; k < 4; ++k) {
    qi[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], inv));
    total = _mm256_add_epi32(total, qi[k]);
  }
  // int32 -> int8 (values are within [-127, 127]); packs work per 128-bit
  // lane, the final permute restores the order.
  const __m256i p01 = _mm256_packs_epi32(qi[0], qi[1]);
  const __m256i p23 = _mm256_packs_epi32(qi[2], qi[3]);
  const __m256i bytes = _mm256_permutevar8x32_epi32(
      _mm256_packs_epi16(p01, p23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_store_si256(reinterpret_cast<__m256i*>(q), bytes);
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(total),
                            _mm256_extracti128_si256(total, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
  *sum = _mm_cvtsi128_si32(t);
  return d;
}

}  // namespace pdserve::kernels_internal::avx2

#endif  // PDSERVE_KERNELS_MATMUL_AVX2_INTERNAL_H_
