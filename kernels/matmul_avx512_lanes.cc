// AVX-512 token-lane kernel for quantized weights (see matmul_avx512.cc for
// the arithmetic every output gets): activations of 16 tokens interleaved in
// the lanes of a zmm, a row tile's weights unpacked to int8 with f32 scales,
// each 4-byte weight group broadcast into vpdpbusd. Compiled with the
// AVX-512 flags; called only after the dispatcher checked CPU support.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/matmul_avx512_internal.h"

namespace pdserve::kernels_internal::avx512 {

// Token-lane layout: token t's blocks go to lane t % 16 of group t / 16 as
// u8 (q + 128); lanes past n_tokens in the last group are zero activations.
void PrepareLanes(const Layout& l, const float* x, int64_t x_stride,
                  int64_t n_tokens, int64_t t_begin, int64_t t_end,
                  uint8_t* xq) {
  const __m128i bias = _mm_set1_epi8(static_cast<char>(0x80));
  const int64_t pad_end = t_end == n_tokens ? l.ntp : t_end;
  for (int64_t t = t_begin; t < pad_end; ++t) {
    uint8_t* group = xq + (t / kLanes) * l.tok_bytes;
    const int64_t lane = t % kLanes;
    for (int64_t b = 0; b < l.nb; ++b) {
      uint8_t* blk = group + b * kLaneBlockBytes;
      ActBlock a{_mm_setzero_si128(), _mm_setzero_si128(), 0.0f, 0};
      if (t < n_tokens) a = QuantizeBlock(x + t * x_stride + b * 32);
      alignas(16) uint8_t q[32];
      _mm_store_si128(reinterpret_cast<__m128i*>(q), _mm_xor_si128(a.lo, bias));
      _mm_store_si128(reinterpret_cast<__m128i*>(q + 16),
                      _mm_xor_si128(a.hi, bias));
      for (int g = 0; g < 8; ++g) {
        std::memcpy(blk + g * 64 + lane * 4, q + g * 4, 4);
      }
      reinterpret_cast<float*>(blk + 512)[lane] = a.d;
      reinterpret_cast<float*>(blk + 576)[lane] =
          a.d * static_cast<float>(a.sum);
    }
  }
}

namespace {

// ---- Quantized kernels: token lanes -----------------------------------------

// A row tile's weights unpacked for the token-lane kernel: per (row, block)
// 32 int8 values (in the activation order), d_w, -128 * sum(w) and m (Q4_1),
// for up to kSegBlocks blocks of kRowTile rows (on the stack: no heap).
constexpr int64_t kSegBlocks = 128;
struct Unpacked {
  alignas(64) int8_t q[kRowTile * kSegBlocks * 32];
  float d[kRowTile * kSegBlocks];
  int32_t corr[kRowTile * kSegBlocks];
  float m[kRowTile * kSegBlocks];
};

// Sum of 32 u8 values in two halves.
inline int32_t SumU8(__m128i lo, __m128i hi) {
  const __m128i s = _mm_add_epi64(_mm_sad_epu8(lo, _mm_setzero_si128()),
                                  _mm_sad_epu8(hi, _mm_setzero_si128()));
  return _mm_cvtsi128_si32(_mm_add_epi64(s, _mm_unpackhi_epi64(s, s)));
}

// Four Q4_x blocks b..b+3 of `row` at once into slots i..i+3 of u.
template <DType kType>
inline void UnpackQ4Four(const uint8_t* row, int64_t b, int64_t i,
                         Unpacked& u) {
  constexpr int64_t kB = kBlockBytes<kType>;
  constexpr int64_t kQs = kType == DType::kQ4_1 ? 4 : 2;  // qs offset
  const uint8_t* p = row + b * kB;
  auto load = [](const uint8_t* a) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
  };
  __m512i raw = _mm512_castsi128_si512(load(p + kQs));
  raw = _mm512_inserti32x4(raw, load(p + kB + kQs), 1);
  raw = _mm512_inserti32x4(raw, load(p + 2 * kB + kQs), 2);
  raw = _mm512_inserti32x4(raw, load(p + 3 * kB + kQs), 3);
  const __m512i mask = _mm512_set1_epi8(0x0f);
  __m512i lo = _mm512_and_si512(raw, mask);
  __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), mask);
  // Nibble sums per block: SAD gives two u64 halves per 128-bit lane.
  const __m512i sad =
      _mm512_sad_epu8(_mm512_add_epi8(lo, hi), _mm512_setzero_si512());
  const __m512i both =
      _mm512_add_epi64(sad, _mm512_shuffle_epi32(sad, _MM_PERM_BADC));
  __m128i sums = _mm512_castsi512_si128(_mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
      both));
  if constexpr (kType == DType::kQ4_0) {
    const __m512i eight = _mm512_set1_epi8(8);
    lo = _mm512_sub_epi8(lo, eight);
    hi = _mm512_sub_epi8(hi, eight);
    sums = _mm_sub_epi32(sums, _mm_set1_epi32(256));
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(u.corr + i),
                   _mm_sub_epi32(_mm_setzero_si128(), _mm_slli_epi32(sums, 7)));
  // Per block [lo 16 | hi 16].
  _mm512_storeu_si512(u.q + i * 32,
                      _mm512_permutex2var_epi64(
                          lo, _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), hi));
  _mm512_storeu_si512(
      u.q + i * 32 + 64,
      _mm512_permutex2var_epi64(
          lo, _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15), hi));
  if constexpr (kType == DType::kQ4_1) {  // (d, m) pairs
    uint32_t dm[4];
    for (int k = 0; k < 4; ++k) std::memcpy(&dm[k], p + k * kB, 4);
    const __m256 f = _mm256_cvtph_ps(
        _mm_setr_epi32(static_cast<int>(dm[0]), static_cast<int>(dm[1]),
                       static_cast<int>(dm[2]), static_cast<int>(dm[3])));
    _mm_storeu_ps(u.d + i, _mm256_castps256_ps128(_mm256_permutevar8x32_ps(
                               f, _mm256_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0))));
    _mm_storeu_ps(u.m + i, _mm256_castps256_ps128(_mm256_permutevar8x32_ps(
                               f, _mm256_setr_epi32(1, 3, 5, 7, 0, 0, 0, 0))));
  } else {
    uint16_t d[4];
    for (int k = 0; k < 4; ++k) std::memcpy(&d[k], p + k * kB, 2);
    _mm_storeu_ps(u.d + i,
                  _mm_cvtph_ps(_mm_setr_epi16(
                      static_cast<int16_t>(d[0]), static_cast<int16_t>(d[1]),
                      static_cast<int16_t>(d[2]), static_cast<int16_t>(d[3]), 0,
                      0, 0, 0)));
  }
}

// Four Q8_0 blocks b..b+3 of `row` at once into slots i..i+3 of u.
inline void UnpackQ8Four(const uint8_t* row, int64_t b, int64_t i,
                         Unpacked& u) {
  constexpr int64_t kB = sizeof(BlockQ8_0);
  const uint8_t* p = row + b * kB;
  auto load = [](const uint8_t* a) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
  };
  const __m512i q01 = _mm512_inserti64x4(_mm512_castsi256_si512(load(p + 2)),
                                         load(p + kB + 2), 1);
  const __m512i q23 = _mm512_inserti64x4(
      _mm512_castsi256_si512(load(p + 2 * kB + 2)), load(p + 3 * kB + 2), 1);
  _mm512_storeu_si512(u.q + i * 32, q01);
  _mm512_storeu_si512(u.q + i * 32 + 64, q23);
  // sum(q + 128) per block: SAD gives four u64 partials per block.
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i s01 =
      _mm512_sad_epu8(_mm512_xor_si512(q01, bias), _mm512_setzero_si512());
  const __m512i s23 =
      _mm512_sad_epu8(_mm512_xor_si512(q23, bias), _mm512_setzero_si512());
  // 128-bit lanes [b0 | b0 | b1 | b1] x [b2 | b2 | b3 | b3] -> 2 partials.
  const __m512i a = _mm512_add_epi64(_mm512_unpacklo_epi64(s01, s23),
                                     _mm512_unpackhi_epi64(s01, s23));
  // u64 lanes: 0 = b0, 1 = b2, 4 = b1, 5 = b3.
  const __m512i t =
      _mm512_add_epi64(a, _mm512_shuffle_i64x2(a, a, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m128i sums = _mm_sub_epi32(
      _mm512_castsi512_si128(_mm512_permutexvar_epi32(
          _mm512_setr_epi32(0, 8, 2, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
          t)),
      _mm_set1_epi32(4096));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(u.corr + i),
                   _mm_sub_epi32(_mm_setzero_si128(), _mm_slli_epi32(sums, 7)));
  uint16_t d[4];
  for (int k = 0; k < 4; ++k) std::memcpy(&d[k], p + k * kB, 2);
  _mm_storeu_ps(
      u.d + i,
      _mm_cvtph_ps(_mm_setr_epi16(
          static_cast<int16_t>(d[0]), static_cast<int16_t>(d[1]),
          static_cast<int16_t>(d[2]), static_cast<int16_t>(d[3]), 0, 0, 0, 0)));
}

template <DType kType>
void UnpackRows(const WeightView& w, int64_t r0, int nr, int64_t b0, int64_t b1,
                Unpacked& u) {
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i bias = _mm_set1_epi8(static_cast<char>(0x80));
  for (int r = 0; r < nr; ++r) {
    const uint8_t* row = w.row(r0 + r);
    const int64_t base = r * kSegBlocks - b0;
    for (int64_t b = b0; b + 4 <= b1; b += 4) {
      const char* ahead = reinterpret_cast<const char*>(row) +
                          16 * w.row_bytes + b * kBlockBytes<kType>;
      _mm_prefetch(ahead, _MM_HINT_T1);
      _mm_prefetch(ahead + 64, _MM_HINT_T1);
      if constexpr (kType == DType::kQ8_0) {
        _mm_prefetch(ahead + 128, _MM_HINT_T1);
        UnpackQ8Four(row, b, base + b, u);
      } else {
        UnpackQ4Four<kType>(row, b, base + b, u);
      }
    }
    const int64_t first = b1 - (b1 - b0) % 4;
    for (int64_t b = first; b < b1; ++b) {
      if (b * kBlockBytes<kType> % 64 < kBlockBytes<kType>) {
        _mm_prefetch(reinterpret_cast<const char*>(row) + 16 * w.row_bytes +
                         b * kBlockBytes<kType>,
                     _MM_HINT_T1);
      }
      __m128i lo, hi;
      int32_t sum;
      if constexpr (kType == DType::kQ8_0) {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
        lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
        hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs + 16));
        sum = SumU8(_mm_xor_si128(lo, bias), _mm_xor_si128(hi, bias)) - 4096;
        u.d[base + b] = Half(blk->d);
      } else {
        const uint8_t* qs;
        if constexpr (kType == DType::kQ4_0) {
          const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
          qs = blk->qs;
          u.d[base + b] = Half(blk->d);
        } else {
          const auto* blk = reinterpret_cast<const BlockQ4_1*>(row) + b;
          qs = blk->qs;
          u.d[base + b] = Half(blk->d);
          u.m[base + b] = Half(blk->m);
        }
        const __m128i raw =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
        lo = _mm_and_si128(raw, mask);
        hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
        sum = SumU8(_mm_add_epi8(lo, hi), _mm_setzero_si128());
        if constexpr (kType == DType::kQ4_0) {
          const __m128i eight = _mm_set1_epi8(8);
          lo = _mm_sub_epi8(lo, eight);
          hi = _mm_sub_epi8(hi, eight);
          sum -= 256;
        }
      }
      auto* q = reinterpret_cast<__m128i*>(u.q + (base + b) * 32);
      _mm_store_si128(q, lo);
      _mm_store_si128(q + 1, hi);
      u.corr[base + b] = -128 * sum;
    }
  }
}

// Blocks [b0, b1) of a row tile for one group of 16 tokens; the running
// sums live in `state` ([0, R): acc, [4, 4 + R): Q4_1 minima terms) between
// segments.
template <DType kType, int R>
void LaneTile(const Unpacked& u, int64_t b0, int64_t b1, const uint8_t* group,
              __m512* state) {
  __m512 acc[R], mt[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    acc[r] = state[r];
    mt[r] = state[kRowTile + r];
  }
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* xb = group + b * kLaneBlockBytes;
    __m512i xv[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) xv[g] = _mm512_load_si512(xb + g * 64);
    const __m512 dx = _mm512_load_ps(reinterpret_cast<const float*>(xb + 512));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const int64_t i = r * kSegBlocks + (b - b0);
      const auto* wq = reinterpret_cast<const int32_t*>(u.q + i * 32);
      __m512i c0 = _mm512_set1_epi32(u.corr[i]);
      __m512i c1 = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int g = 0; g < 8; g += 2) {
        c0 = _mm512_dpbusd_epi32(c0, xv[g], _mm512_set1_epi32(wq[g]));
        c1 = _mm512_dpbusd_epi32(c1, xv[g + 1], _mm512_set1_epi32(wq[g + 1]));
      }
      const __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(c0, c1));
      acc[r] =
          _mm512_fmadd_ps(f, _mm512_mul_ps(_mm512_set1_ps(u.d[i]), dx), acc[r]);
      if constexpr (kType == DType::kQ4_1) {
        mt[r] = _mm512_fmadd_ps(
            _mm512_set1_ps(u.m[i]),
            _mm512_load_ps(reinterpret_cast<const float*>(xb + 576)), mt[r]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    state[r] = acc[r];
    state[kRowTile + r] = mt[r];
  }
}

template <DType kType>
void LaneTileN(int nr, const Unpacked& u, int64_t b0, int64_t b1,
               const uint8_t* group, __m512* state) {
  switch (nr) {
    case 4:
      return LaneTile<kType, 4>(u, b0, b1, group, state);
    case 3:
      return LaneTile<kType, 3>(u, b0, b1, group, state);
    case 2:
      return LaneTile<kType, 2>(u, b0, b1, group, state);
    default:
      return LaneTile<kType, 1>(u, b0, b1, group, state);
  }
}

// Row tiles of 4; for each, up to kGroupChunk token groups at a time sweep
// the row tile's blocks in segments of kSegBlocks (one segment and one chunk
// for most shapes, so each row is unpacked once).
template <DType kType>
void LaneRowsTyped(const MatMulArgs& a, const Layout& l, int64_t row_begin,
                   int64_t row_end) {
  constexpr int64_t kGroupChunk = 16;
  Unpacked u;
  __m512 state[kGroupChunk][2 * kRowTile];
  const int64_t n_groups = (a.n_tokens + kLanes - 1) / kLanes;
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kRowTile) {
    const int nr = static_cast<int>(std::min<int64_t>(kRowTile, row_end - r0));
    for (int64_t g0 = 0; g0 < n_groups; g0 += kGroupChunk) {
      const int64_t g1 = std::min(n_groups, g0 + kGroupChunk);
      for (int64_t g = g0; g < g1; ++g) {
        for (__m512& v : state[g - g0]) v = _mm512_setzero_ps();
      }
      for (int64_t b0 = 0; b0 < l.nb; b0 += kSegBlocks) {
        const int64_t b1 = std::min(l.nb, b0 + kSegBlocks);
        UnpackRows<kType>(*a.w, r0, nr, b0, b1, u);
        for (int64_t g = g0; g < g1; ++g) {
          LaneTileN<kType>(nr, u, b0, b1, a.xq + g * l.tok_bytes,
                           state[g - g0]);
        }
      }
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t t0 = g * kLanes;
        const int64_t nt = std::min<int64_t>(kLanes, a.n_tokens - t0);
        for (int r = 0; r < nr; ++r) {
          __m512 v = state[g - g0][r];
          if constexpr (kType == DType::kQ4_1) {
            v = _mm512_add_ps(v, state[g - g0][kRowTile + r]);
          }
          alignas(64) float out[kLanes];
          _mm512_store_ps(out, v);
          for (int64_t t = 0; t < nt; ++t) {
            a.y[(t0 + t) * a.y_stride + r0 + r] = out[t];
          }
        }
      }
    }
  }
}

}  // namespace

void LaneRows(DType type, const MatMulArgs& a, const Layout& l,
              int64_t row_begin, int64_t row_end) {
  VisitDType<DType::kQ8_0, DType::kQ4_0, DType::kQ4_1>(type, [&](auto t) {
    LaneRowsTyped<decltype(t)::value>(a, l, row_begin, row_end);
  });
}

}  // namespace pdserve::kernels_internal::avx512
