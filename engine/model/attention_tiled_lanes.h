// The 16-lane vector primitives of the tiled attention kernels (see
// attention_tiled_impl.h, the only includer): GCC vector types, loads of
// every stored KV type, exp, horizontal sum and max in a fixed order, lane
// masks, and bf16 pair dot products (vdpbf16ps where the CPU has
// AVX512-BF16, the same rounding steps in f32 elsewhere). Compiled once per
// SIMD level inside that level's namespace, PDSERVE_ATTN_NS.
#ifndef PDSERVE_ENGINE_MODEL_ATTENTION_TILED_LANES_H_
#define PDSERVE_ENGINE_MODEL_ATTENTION_TILED_LANES_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "engine/model/attention_tiled.h"

namespace pdserve::PDSERVE_ATTN_NS {
namespace {

constexpr int64_t kL = 16;  // lanes: keys per tile
constexpr int64_t kMaxHeadDim = kAttnMaxHeadDim;
using V16 = float __attribute__((vector_size(64), aligned(4)));
using U16x16 = uint16_t __attribute__((vector_size(32), aligned(2)));
using U32x16 = uint32_t __attribute__((vector_size(64), aligned(4)));
using I32x16 = int32_t __attribute__((vector_size(64), aligned(4)));
using I8x16 = int8_t __attribute__((vector_size(16), aligned(1)));

inline V16 LoadF(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void StoreF(float* p, V16 v) { std::memcpy(p, &v, sizeof(v)); }
inline V16 Splat(float x) { return V16{} + x; }

inline V16 LoadBf16(const uint16_t* p) {
  U16x16 h;
  std::memcpy(&h, p, sizeof(h));
  const U32x16 u = __builtin_convertvector(h, U32x16) << 16;
  V16 f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline V16 LoadF16(const uint16_t* p) {
  V16 f;
#if defined(__AVX512F__)
  const __m512 v =
      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  std::memcpy(&f, &v, sizeof(f));
#elif defined(__F16C__)
  const __m256 a =
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256 b =
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
  std::memcpy(&f, &a, 32);
  std::memcpy(reinterpret_cast<char*>(&f) + 32, &b, 32);
#else
  // Exact IEEE half -> single in integer lanes.
  U16x16 h;
  std::memcpy(&h, p, sizeof(h));
  const U32x16 w = __builtin_convertvector(h, U32x16);
  const U32x16 sign = (w & 0x8000u) << 16;
  const U32x16 em = w & 0x7fffu;
  U32x16 normal = (em << 13) + 0x38000000u;
  normal = em >= 0x7c00u ? normal + 0x38000000u : normal;  // inf / NaN
  const V16 sub = __builtin_convertvector(em, V16) * 5.9604644775390625e-08f;
  U32x16 subbits;
  std::memcpy(&subbits, &sub, sizeof(sub));
  const U32x16 bits = (em < 0x400u ? subbits : normal) | sign;
  std::memcpy(&f, &bits, sizeof(f));
#endif
  return f;
}

inline V16 LoadQ8(const int8_t* p) {
  I8x16 q;
  std::memcpy(&q, p, sizeof(q));
  return __builtin_convertvector(__builtin_convertvector(q, I32x16), V16);
}

// e^x for 16 lanes: the same operations as attn_internal::AttnExp.
inline V16 ExpV(V16 x) {
  const V16 xc = x < -87.0f ? Splat(-87.0f) : (x > 88.0f ? Splat(88.0f) : x);
  const V16 t = xc * 1.44269504088896341f + 12582912.0f;
  const V16 n = t - 12582912.0f;
  V16 r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  V16 p = Splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  I32x16 ti;
  std::memcpy(&ti, &t, sizeof(t));
  const I32x16 e = ((ti - 0x4B400000) + 127) << 23;
  V16 scale;
  std::memcpy(&scale, &e, sizeof(e));
  const V16 y = p * scale;
  return x < -87.0f ? V16{} : y;
}

// Pairwise sum of 16 lanes: halves added lane by lane, 8 + 4 + 2 + 1
// (a[i] + a[i + w] for w = 8, 4, 2, 1), by shuffles.
inline float HSum(V16 v) {
  v = v + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9,
                                  10, 11, 12, 13, 14, 15);
  v = v + __builtin_shufflevector(v, v, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7,
                                  4, 5, 6, 7);
  v = v + __builtin_shufflevector(v, v, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
                                  2, 3, 2, 3);
  v = v + __builtin_shufflevector(v, v, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                  1, 1, 1, 1);
  return v[0];
}

inline V16 MaxV(V16 a, V16 b) { return a < b ? b : a; }

// The largest of 16 lanes (exact: the order of a max does not matter).
inline float HMaxV(V16 v) {
  v = MaxV(v, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 8,
                                      9, 10, 11, 12, 13, 14, 15));
  v = MaxV(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6,
                                      7, 4, 5, 6, 7));
  v = MaxV(v, __builtin_shufflevector(v, v, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2,
                                      3, 2, 3, 2, 3));
  v = MaxV(v, __builtin_shufflevector(v, v, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                      1, 1, 1, 1, 1));
  return v[0];
}

// Lanes at or past `valid` (counting from lane 0) set to -inf.
inline V16 MaskFrom(V16 v, int64_t valid) {
  const I32x16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const I32x16 keep = lane < static_cast<int32_t>(valid);
  return keep ? v : Splat(-std::numeric_limits<float>::infinity());
}

// bf16 pairs.

inline uint32_t RoundBf16Bits(float x) {  // RNE, finite x
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
inline float Bf16Float(uint32_t h) {
  const uint32_t u = h << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// 16 lanes of bf16 pairs (32 bf16), as they are.
inline U32x16 LoadPairs(const uint16_t* pairs) {
  U32x16 u;
  std::memcpy(&u, pairs, sizeof(u));
  return u;
}

// acc + the 16 lanes of pairs `k` times the pair (odd << 16 | even).
inline V16 DotPairs(V16 acc, U32x16 k, uint32_t pair) {
#if defined(__AVX512BF16__)
  __m512 a;
  std::memcpy(&a, &acc, sizeof(a));
  __m512i kv;
  std::memcpy(&kv, &k, sizeof(kv));
  a = _mm512_dpbf16_ps(a, (__m512bh)kv, (__m512bh)_mm512_set1_epi32(pair));
  std::memcpy(&acc, &a, sizeof(a));
  return acc;
#else
  const U32x16 lo = k << 16, hi = k & 0xffff0000u;
  V16 even, odd;
  std::memcpy(&even, &lo, sizeof(even));
  std::memcpy(&odd, &hi, sizeof(odd));
  return (acc + Bf16Float(pair >> 16) * odd) + Bf16Float(pair & 0xffffu) * even;
#endif
}

inline V16 DotPairs(V16 acc, const uint16_t* pairs, uint32_t pair) {
  return DotPairs(acc, LoadPairs(pairs), pair);
}

}  // namespace
}  // namespace pdserve::PDSERVE_ATTN_NS

#endif  // PDSERVE_ENGINE_MODEL_ATTENTION_TILED_LANES_H_
