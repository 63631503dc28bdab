// AVX-512 (F, BW, VL, DQ, VNNI) kernels. Compiled with its own -m flags and
// only called after the dispatcher checked CPU support.
//
// Quantized weights (Q8_0, Q4_0, Q4_1) against 8-bit activation blocks. Every
// output (row o, token t) gets this arithmetic, whichever kernel computes it:
//   for each block b, in order:
//     D_b  = exact int32 dot of the block's integer weights (Q8_0: q;
//            Q4_0: nibble - 8; Q4_1: nibble) and activation quants;
//     acc  = fma(float(D_b), f32(d_w,b * d_x,b), acc);
//     Q4_1: mt = fma(m_b, d_x,b * sum(x quants)_b, mt);
//   y = acc (+ mt for Q4_1).
// Two kernels implement it:
//   * token lanes (n_tokens >= kLaneMinTokens): 16 tokens in the lanes of a
//     zmm. Activations are stored +128 (u8) token-interleaved, four values
//     per lane per 64-byte vector; a row tile's blocks are first unpacked to
//     int8 with f32 scales and -128 * sum(w) (which cancels the +128), and
//     each 4-byte weight group is broadcast into vpdpbusd. One cvt, mul and
//     fma per (row, block) then serve 16 tokens.
//   * block lanes (fewer tokens, mat-vec): a pair of blocks in one zmm, lanes
//     [A0..15 | B0..15 | A16..31 | B16..31] (u8 weights for Q4_x) or
//     [A0..31 | B0..31] (u8 activations + 128 for Q8_0), register tiles of
//     up to 4 rows x 4 tokens; the int32 lanes of each block are summed
//     exactly (shuffles and adds) into D_A, D_B for 4 rows, which then take
//     the steps above with rows in xmm lanes.
// The token-lane kernel lives in matmul_avx512_lanes.cc. Weights are
// prefetched 16 rows ahead into L2.
//
// Float weights (F32, F16, BF16): register tiles of up to 4 rows x 6 tokens
// (FloatTile) for short batches; from kGemmMinTokens tokens on, the GEMM of
// matmul_avx512_gemm.cc, which reproduces FloatTile's arithmetic exactly.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "kernels/matmul_avx512_internal.h"
#include "kernels/matmul_internal.h"

namespace pdserve::kernels_internal {
namespace {

using avx512::ActBlock;
using avx512::Half;
using avx512::kBlockBytes;
using avx512::kLaneMinTokens;
using avx512::kRowTile;
using avx512::LaneRows;
using avx512::LoadFloatRow16;
using avx512::Layout;
using avx512::MakeLayout;
using avx512::PrepareLanes;
using avx512::QuantizeBlock;
using avx512::TailMask;

// Token tile of the float kernels and of the block-lane quantized kernel.
template <DType kType>
constexpr int kTokTile = IsQuantized(kType) ? 4 : 6;

// ---- Prepared activations ---------------------------------------------------

int64_t PreparedBytes(DType type, int64_t cols, int64_t n_tokens) {
  const Layout l = MakeLayout(type, cols, n_tokens);
  return l.sums_offset +
         (type == DType::kQ4_1 && !l.lanes ? l.nb * l.ntp * 4 : 0);
}

void Prepare(DType type, const float* x, int64_t x_stride, int64_t cols,
             int64_t n_tokens, int64_t t_begin, int64_t t_end, uint8_t* xq) {
  const Layout l = MakeLayout(type, cols, n_tokens);
  if (l.lanes)
    return PrepareLanes(l, x, x_stride, n_tokens, t_begin, t_end, xq);
  auto* sums = reinterpret_cast<float*>(xq + l.sums_offset);
  for (int64_t t = t_begin; t < t_end; ++t) {
    uint8_t* q = xq + t * l.tok_bytes;
    auto* scale = reinterpret_cast<float*>(q + l.np * 64);
    auto* corr = reinterpret_cast<int32_t*>(q + l.np * 128);
    for (int64_t p = 0; p < l.np; ++p) {
      const int64_t b = 2 * p;
      const ActBlock A = QuantizeBlock(x + t * x_stride + b * 32);
      const ActBlock B =
          b + 1 < l.nb
              ? QuantizeBlock(x + t * x_stride + b * 32 + 32)
              : ActBlock{_mm_setzero_si128(), _mm_setzero_si128(), 0.0f, 0};
      if (type == DType::kQ4_1) {
        sums[b * l.ntp + t] = A.d * static_cast<float>(A.sum);
        if (b + 1 < l.nb)
          sums[(b + 1) * l.ntp + t] = B.d * static_cast<float>(B.sum);
      }
      __m512i v;
      if (type == DType::kQ8_0) {  // [A0..31 | B0..31] + 128
        v = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_set_m128i(A.hi, A.lo)),
            _mm256_set_m128i(B.hi, B.lo), 1);
        v = _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
      } else {  // [A0..15 | B0..15 | A16..31 | B16..31]
        v = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_set_m128i(B.lo, A.lo)),
            _mm256_set_m128i(B.hi, A.hi), 1);
      }
      _mm512_store_si512(q + p * 64, v);
      _mm512_store_ps(scale + p * 16,
                      _mm512_mask_blend_ps(0xf0f0, _mm512_set1_ps(A.d),
                                           _mm512_set1_ps(B.d)));
      if (type == DType::kQ4_0) {  // -8 * (sum of the 4 values of each lane)
        const __m512i eights = _mm512_set1_epi8(8);
        _mm512_store_si512(
            corr + p * 16,
            _mm512_sub_epi32(
                _mm512_setzero_si512(),
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), eights, v)));
      }
    }
  }
}

// ---- Quantized kernels: block lanes ----------------------------------------

// Loads the nibbles of blocks b (and b+1 when `pair`) as 64 u8 values in the
// [A_lo | B_lo | A_hi | B_hi] order.
inline __m512i LoadNibblePair(const uint8_t* qa, const uint8_t* qb, bool pair) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qa));
  const __m128i b = pair ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(qb))
                         : _mm_setzero_si128();
  const __m256i raw = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
  const __m256i mask = _mm256_set1_epi8(0x0f);
  const __m256i lo = _mm256_and_si256(raw, mask);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Q8_0 blocks b (and b+1 when `pair`) as 64 s8 values [A0..31 | B0..31].
inline __m512i LoadQ8Pair(const BlockQ8_0* blk, bool pair) {
  const __m256i a =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[0].qs));
  const __m256i b =
      pair ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[1].qs))
           : _mm256_setzero_si256();
  return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

// The f16 scales of blocks A and B (B = 0 unless kPair) as [dA, dB, 0, 0].
template <bool kPair>
inline __m128 PairScales(const uint16_t* da, const uint16_t* db) {
  __m128i h = _mm_cvtsi32_si128(*da);
  if constexpr (kPair) h = _mm_insert_epi16(h, *db, 1);
  return _mm_cvtph_ps(h);
}

// Q4_1 blocks A and B (B = 0 unless kPair) as [dA, mA, dB, mB].
template <bool kPair>
inline __m128 PairScalesMins(const BlockQ4_1* blk) {
  uint32_t a, b = 0;
  std::memcpy(&a, &blk[0].d, 4);
  if constexpr (kPair) std::memcpy(&b, &blk[1].d, 4);
  return _mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128(static_cast<int>(a)),
                                       static_cast<int>(b), 1));
}

// Exact per-block sums of four rows' block-pair dot products (int32 lanes
// [A 4 | B 4 | A 4 | B 4], or [A 8 | B 8] for Q8_0) as
// [D_A rows 0..3 | D_B rows 0..3].
template <DType kType>
inline __m256i SumBlockLanes(const __m512i* d) {
  // 128-bit lanes [r A | r B | r+1 A | r+1 B], 4 partial sums each.
  constexpr int kLo = kType == DType::kQ8_0 ? 0x88 : 0x44;
  constexpr int kHi = kType == DType::kQ8_0 ? 0xdd : 0xee;
  const __m512i s01 = _mm512_add_epi32(_mm512_shuffle_i64x2(d[0], d[1], kLo),
                                       _mm512_shuffle_i64x2(d[0], d[1], kHi));
  const __m512i s23 = _mm512_add_epi32(_mm512_shuffle_i64x2(d[2], d[3], kLo),
                                       _mm512_shuffle_i64x2(d[2], d[3], kHi));
  // Adjacent lanes summed: 128-bit lanes [r0 A, r2 A | r0 B, r2 B |
  // r1 A, r3 A | r1 B, r3 B], 2 partial sums each.
  const __m512 a = _mm512_castsi512_ps(s01), b = _mm512_castsi512_ps(s23);
  const __m512i s = _mm512_add_epi32(
      _mm512_castps_si512(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))),
      _mm512_castps_si512(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))));
  // Full sums, duplicated in adjacent lanes: r0A at 0, r2A 2, r0B 4, r2B 6,
  // r1A 8, r3A 10, r1B 12, r3B 14.
  const __m512i t = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, _MM_PERM_CDAB));
  const __m512i idx =
      _mm512_setr_epi32(0, 8, 2, 10, 4, 12, 6, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castsi512_si256(_mm512_permutexvar_epi32(idx, t));
}

// Accumulators of a block-lane tile: rows in xmm lanes, one per token.
template <int T>
struct QuantAcc {
  __m128 acc[T];
  __m128 accm[T];  // Q4_1: sum over blocks of m * (d_x * sum x)
};

// One block pair (or, when !kPair, the final odd block) of an R x T tile.
template <DType kType, int R, int T, bool kPair>
__attribute__((always_inline)) inline void QuantPairStep(
    QuantAcc<T>& s, const uint8_t* const* rows, const uint8_t* const* xt,
    const float* sums, const Layout& l, int64_t p, bool prefetch) {
  const int64_t b = 2 * p;
  const __m512i zero = _mm512_setzero_si512();
  __m512i wv[4] = {zero, zero, zero, zero};
  __m512i wc[4] = {zero, zero, zero, zero};
  __m128 dm[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(),
                  _mm_setzero_ps()};
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    // Fetch ahead in the weight stream (four row tiles on) into L2; the L1
    // streamer takes it from there.
    if (prefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(rows[r]) + 16 * l.row_bytes +
                       p * 2 * kBlockBytes<kType>,
                   _MM_HINT_T1);
    }
    if constexpr (kType == DType::kQ8_0) {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(rows[r]) + b;
      wv[r] = LoadQ8Pair(blk, kPair);
      dm[r] = PairScales<kPair>(&blk[0].d, &blk[1].d);
      // -(128 * sum of w) per lane cancels the +128 bias of x.
      wc[r] = _mm512_sub_epi32(
          zero, _mm512_dpbusd_epi32(
                    zero, _mm512_set1_epi8(static_cast<char>(0x80)), wv[r]));
    } else if constexpr (kType == DType::kQ4_0) {
      const auto* blk = reinterpret_cast<const BlockQ4_0*>(rows[r]) + b;
      wv[r] = LoadNibblePair(blk[0].qs, kPair ? blk[1].qs : nullptr, kPair);
      dm[r] = PairScales<kPair>(&blk[0].d, &blk[1].d);
    } else {
      const auto* blk = reinterpret_cast<const BlockQ4_1*>(rows[r]) + b;
      wv[r] = LoadNibblePair(blk[0].qs, kPair ? blk[1].qs : nullptr, kPair);
      dm[r] = PairScalesMins<kPair>(blk);
    }
  }
  // Weight scales of blocks A and B with rows in lanes (absent rows are 0).
  __m128 da, db;
  if constexpr (kType == DType::kQ4_1) {              // dm = [dA, mA, dB, mB]
    const __m128 t0 = _mm_unpacklo_ps(dm[0], dm[1]);  // dA0 dA1 mA0 mA1
    const __m128 t1 = _mm_unpacklo_ps(dm[2], dm[3]);
    const __m128 u0 = _mm_unpackhi_ps(dm[0], dm[1]);  // dB0 dB1 mB0 mB1
    const __m128 u1 = _mm_unpackhi_ps(dm[2], dm[3]);
    da = _mm_movelh_ps(t0, t1);
    db = _mm_movelh_ps(u0, u1);
    const __m128 ma = _mm_movehl_ps(t1, t0);
    const __m128 mb = _mm_movehl_ps(u1, u0);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      s.accm[t] =
          _mm_fmadd_ps(ma, _mm_broadcast_ss(sums + b * l.ntp + t), s.accm[t]);
      if constexpr (kPair) {
        s.accm[t] = _mm_fmadd_ps(
            mb, _mm_broadcast_ss(sums + (b + 1) * l.ntp + t), s.accm[t]);
      }
    }
  } else {                                            // dm = [dA, dB, 0, 0]
    const __m128 t0 = _mm_unpacklo_ps(dm[0], dm[1]);  // dA0 dA1 dB0 dB1
    const __m128 t1 = _mm_unpacklo_ps(dm[2], dm[3]);
    da = _mm_movelh_ps(t0, t1);
    db = _mm_movehl_ps(t1, t0);
  }
  const __m256 dw = _mm256_set_m128(db, da);
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const __m512i xv = _mm512_load_si512(xt[t] + p * 64);
    __m512i xc = zero;
    if constexpr (kType == DType::kQ4_0) {
      xc = _mm512_load_si512(xt[t] + l.np * 128 + p * 64);
    }
    __m512i dot[4];
#pragma GCC unroll 8
    for (int r = 0; r < 4; ++r) {
      dot[r] = zero;
      if (r < R) {
        if constexpr (kType == DType::kQ8_0) {
          dot[r] = _mm512_dpbusd_epi32(wc[r], xv, wv[r]);
        } else if constexpr (kType == DType::kQ4_0) {
          dot[r] = _mm512_dpbusd_epi32(xc, wv[r], xv);
        } else {
          dot[r] = _mm512_dpbusd_epi32(zero, wv[r], xv);
        }
      }
    }
    const __m256i d = SumBlockLanes<kType>(dot);
    const __m256 f = _mm256_cvtepi32_ps(d);
    // [d_x,A x4 | d_x,B x4]
    const __m256 dx = _mm256_load_ps(
        reinterpret_cast<const float*>(xt[t] + l.np * 64) + p * 16);
    const __m256 sc = _mm256_mul_ps(dw, dx);
    s.acc[t] = _mm_fmadd_ps(_mm256_castps256_ps128(f),
                            _mm256_castps256_ps128(sc), s.acc[t]);
    if constexpr (kPair) {
      s.acc[t] = _mm_fmadd_ps(_mm256_extractf128_ps(f, 1),
                              _mm256_extractf128_ps(sc, 1), s.acc[t]);
    }
  }
}

template <DType kType, int R, int T>
void QuantTile(const WeightView& w, int64_t r0, const uint8_t* xq,
               const Layout& l, int64_t t0, float* y, int64_t y_stride) {
  QuantAcc<T> s;
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    s.acc[t] = _mm_setzero_ps();
    s.accm[t] = _mm_setzero_ps();
  }
  const uint8_t* xt[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) xt[t] = xq + (t0 + t) * l.tok_bytes;
  const uint8_t* rows[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) rows[r] = w.row(r0 + r);
  const float* sums = reinterpret_cast<const float*>(xq + l.sums_offset) + t0;
  const int64_t full_pairs = l.nb / 2;
  // Only the first token tile streams the rows in; later ones hit L1/L2.
  const bool prefetch = t0 == 0;
  for (int64_t p = 0; p < full_pairs; ++p) {
    QuantPairStep<kType, R, T, true>(s, rows, xt, sums, l, p, prefetch);
  }
  if (l.nb % 2 != 0) {
    QuantPairStep<kType, R, T, false>(s, rows, xt, sums, l, full_pairs,
                                      prefetch);
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    __m128 v = s.acc[t];
    if constexpr (kType == DType::kQ4_1) v = _mm_add_ps(v, s.accm[t]);
    alignas(16) float out[4];
    _mm_store_ps(out, v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) y[(t0 + t) * y_stride + r0 + r] = out[r];
  }
}

// ---- Float kernels
// -----------------------------------------------------------

template <DType kType, int R, int T>
void FloatTile(const MatMulArgs& a, int64_t r0, int64_t t0) {
  const WeightView& w = *a.w;
  __m512 acc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  const float* xt[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) xt[t] = a.x + (t0 + t) * a.x_stride;
  const uint8_t* rows[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) rows[r] = w.row(r0 + r);
  for (int64_t i = 0; i < w.cols; i += 16) {
    const int64_t left = w.cols - i;
    const __mmask16 mask = left >= 16
                               ? static_cast<__mmask16>(0xffff)
                               : static_cast<__mmask16>((1u << left) - 1);
    __m512 xv[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) xv[t] = _mm512_maskz_loadu_ps(mask, xt[t] + i);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      // Stream the weights in during the first token tile only; 2-byte types
      // cover a cache line every other step.
      if (t0 == 0 && (kType == DType::kF32 || i % 32 == 0)) {
        _mm_prefetch(reinterpret_cast<const char*>(rows[r]) + 8 * w.row_bytes +
                         i * (kType == DType::kF32 ? 4 : 2),
                     _MM_HINT_T0);
      }
      const __m512 wv = LoadFloatRow16<kType>(rows[r], i, mask);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t)
        acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      a.y[(t0 + t) * a.y_stride + r0 + r] = avx512::ReduceAdd16(acc[r][t]);
    }
  }
}

// ---- Tile dispatch
// -----------------------------------------------------------

template <DType kType, int R, int T>
void Tile(const MatMulArgs& a, const Layout& l, int64_t r0, int64_t t0) {
  if constexpr (kType == DType::kF32 || kType == DType::kF16 ||
                kType == DType::kBF16) {
    FloatTile<kType, R, T>(a, r0, t0);
  } else {
    QuantTile<kType, R, T>(*a.w, r0, a.xq, l, t0, a.y, a.y_stride);
  }
}

using TileFn = void (*)(const MatMulArgs&, const Layout&, int64_t, int64_t);

template <DType kType, int R, int... Ts>
constexpr auto TileRow(std::integer_sequence<int, Ts...>) {
  return std::array<TileFn, sizeof...(Ts)>{&Tile<kType, R, Ts + 1>...};
}

template <DType kType, int... Rs>
constexpr auto TileTable(std::integer_sequence<int, Rs...>) {
  return std::array<std::array<TileFn, kTokTile<kType>>, sizeof...(Rs)>{
      TileRow<kType, Rs + 1>(
          std::make_integer_sequence<int, kTokTile<kType>>())...};
}

template <DType kType>
void RowsTyped(const MatMulArgs& a, int64_t row_begin, int64_t row_end) {
  static constexpr auto kTable =
      TileTable<kType>(std::make_integer_sequence<int, kRowTile>());
  Layout l = MakeLayout(kType, a.w->cols, a.n_tokens);
  l.row_bytes = a.w->row_bytes;
  if constexpr (IsQuantized(kType)) {
    if (l.lanes) return LaneRows(kType, a, l, row_begin, row_end);
  }
  // Float weights: whole token tiles in the GEMM, the remainder below.
  int64_t t_begin = 0;
  if constexpr (!IsQuantized(kType)) {
    t_begin = avx512::FloatGemmTokens(a.n_tokens);
    if (t_begin > 0) avx512::FloatGemmRows(a, row_begin, row_end);
    if (t_begin == a.n_tokens) return;
  }
  // Rows are taken in chunks of ~128 KiB of weights (L2-resident); within a
  // chunk every token tile sweeps all row tiles, so a token tile's
  // activations stay in L1 while the chunk's weights are re-read from L2.
  const int64_t chunk = std::max<int64_t>(
      kRowTile,
      (128 << 10) / std::max<int64_t>(1, a.w->row_bytes) / kRowTile * kRowTile);
  for (int64_t c0 = row_begin; c0 < row_end; c0 += chunk) {
    const int64_t c1 = std::min(row_end, c0 + chunk);
    for (int64_t t0 = t_begin; t0 < a.n_tokens; t0 += kTokTile<kType>) {
      const int64_t nt = std::min<int64_t>(kTokTile<kType>, a.n_tokens - t0);
      for (int64_t r0 = c0; r0 < c1; r0 += kRowTile) {
        const int64_t nr = std::min<int64_t>(kRowTile, c1 - r0);
        kTable[nr - 1][nt - 1](a, l, r0, t0);
      }
    }
  }
}

void Rows(const MatMulArgs& a, int64_t row_begin, int64_t row_end) {
  VisitDType(a.w->type, [&](auto t) {
    RowsTyped<decltype(t)::value>(a, row_begin, row_end);
  });
}

float Dot(const float* a, const float* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 =
        _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16),
                           _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16
                            ? static_cast<__mmask16>(0xffff)
                            : static_cast<__mmask16>((1u << (n - i)) - 1);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i),
                           _mm512_maskz_loadu_ps(m, b + i), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

void Axpy(float alpha, const float* x, float* y, int64_t n) {
  const __m512 av = _mm512_set1_ps(alpha);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16
                            ? static_cast<__mmask16>(0xffff)
                            : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 yv = _mm512_maskz_loadu_ps(m, y + i);
    _mm512_mask_storeu_ps(
        y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), yv));
  }
}

// exp(x) for |x| <= 88 (Cephes expf: range reduction by ln 2 in two parts, a
// degree-7 polynomial, scaling by 2^n); clamped outside.
inline __m512 Exp(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-88.0f)),
                    _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(
      _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500E-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r),
                      _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(m, up + i);
    const __m512 silu = _mm512_div_ps(
        g, _mm512_add_ps(one, Exp(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(silu, u));
  }
}

void GeluTanh(const float* x, int64_t n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 minus_two_c = _mm512_set1_ps(-2.0f * 0.7978845608028654f);
  const __m512 cubic = _mm512_set1_ps(0.044715f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 inner =
        _mm512_fmadd_ps(_mm512_mul_ps(cubic, v), _mm512_mul_ps(v, v), v);
    const __m512 e = Exp(_mm512_mul_ps(minus_two_c, inner));
    _mm512_mask_storeu_ps(out + i, m, _mm512_div_ps(v, _mm512_add_ps(one, e)));
  }
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    vmax = _mm512_mask_max_ps(vmax, m, vmax, _mm512_maskz_loadu_ps(m, x + i));
  }
  const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 e = _mm512_maskz_mov_ps(
        m, Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), max)));
    _mm512_mask_storeu_ps(x + i, m, e);
    sum = _mm512_add_ps(sum, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(x + i, m,
                          _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
  }
}

// The exps are summed in f64 (no error growth with n); NaN anywhere gives
// NaN, a max of +-inf gives that infinity.
float LogSumExp(const float* x, int64_t n) {
  if (n <= 0) return -std::numeric_limits<float>::infinity();
  __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __mmask16 nan = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    nan |= _mm512_mask_cmp_ps_mask(m, v, v, _CMP_UNORD_Q);
    vmax = _mm512_mask_max_ps(vmax, m, vmax, v);
  }
  if (nan != 0) return std::numeric_limits<float>::quiet_NaN();
  const float max_s = _mm512_reduce_max_ps(vmax);
  if (std::isinf(max_s)) return max_s;
  const __m512 max = _mm512_set1_ps(max_s);
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 e = _mm512_maskz_mov_ps(
        m, Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), max)));
    s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    s1 =
        _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(
                              _mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  return LogSumExpFinish(max_s, _mm512_reduce_add_pd(_mm512_add_pd(s0, s1)));
}

// ArgMaxScalar's answer: x[0] when it is NaN; else the first index of the
// largest non-NaN value (found with vector max, then vector equality).
int64_t ArgMax(const float* x, int64_t n) {
  if (n <= 0 || std::isnan(x[0])) return 0;
  __m512 vmax = _mm512_set1_ps(x[0]);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    // Lanes past n and NaN lanes keep vmax.
    vmax = _mm512_mask_max_ps(vmax, m & _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q),
                              vmax, v);
  }
  const __m512 best = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 eq = _mm512_mask_cmp_ps_mask(
        TailMask(n - i), _mm512_maskz_loadu_ps(TailMask(n - i), x + i), best,
        _CMP_EQ_OQ);
    if (eq != 0) return i + __builtin_ctz(eq);
  }
  return 0;  // unreachable: the max is one of the values
}

}  // namespace

const IsaKernels& Avx512Kernels() {
  // Rows are split between threads in units of the float GEMM's 32-row
  // panels (a multiple of the quantized kernels' row tile).
  // Weights packed at load (Avx512PackedKernels) take BF16 through
  // vdpbf16ps where the CPU has AVX512-BF16.
  static const IsaKernels k{"avx512",   32,
                            &PreparedBytes, &Prepare,
                            &Rows,      &Dot,
                            &Axpy,      &SwiGlu,
                            &Softmax,   &LogSumExp,
                            &ArgMax,    &GeluTanh,
                            &Avx512PackedKernels(CpuHasAvx512Bf16())};
  return k;
}

}  // namespace pdserve::kernels_internal
