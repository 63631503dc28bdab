// AVX2 + FMA + F16C kernels (Haswell and later). Compiled with its own -m
// flags and only called after the dispatcher checked CPU support.
//
// Quantized weights work one 32-value block (one ymm of int8) at a time with
// vpmaddubsw + vpmaddwd (u8 x s8 -> int32 per 4 values):
//   Q8_0: |w| x sign(x, w) (GGML's trick; no int16 overflow for |q| <= 127);
//   Q4_0: nibble x x, plus a per-token correction -8 * sum(x) per int32 lane;
//   Q4_1: nibble x x, plus m * (d_x * sum x) accumulated per (row, token).
// Each (row, token) output has its own accumulator and the same sequence of
// operations whatever the tile shape around it (batch invariance).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "kernels/matmul_avx2_internal.h"
#include "kernels/matmul_internal.h"

namespace pdserve::kernels_internal {
namespace {

using avx2::Half;
using avx2::HSum;
using avx2::QuantizeBlock;

constexpr int kRowTile = 4;
constexpr int kTokTile = 2;

// Per token: nb blocks of 32 int8 (natural order); nb f32 scales (padded to
// 32 bytes); for Q4_0 nb x 8 int32 corrections. After all tokens, for Q4_1, a
// table of d_x * sum(q_x) indexed [block][token].
struct Layout {
  int64_t nb;
  int64_t scale_offset;
  int64_t corr_offset;
  int64_t tok_bytes;
  int64_t sums_offset;
};

Layout MakeLayout(DType type, int64_t cols, int64_t n_tokens) {
  Layout l;
  l.nb = cols / 32;
  l.scale_offset = l.nb * 32;
  l.corr_offset = l.scale_offset + (l.nb * 4 + 31) / 32 * 32;
  l.tok_bytes = l.corr_offset + (type == DType::kQ4_0 ? l.nb * 32 : 0);
  l.sums_offset = l.tok_bytes * n_tokens;
  return l;
}

int64_t PreparedBytes(DType type, int64_t cols, int64_t n_tokens) {
  const Layout l = MakeLayout(type, cols, n_tokens);
  return l.sums_offset + (type == DType::kQ4_1 ? l.nb * n_tokens * 4 : 0);
}

void Prepare(DType type, const float* x, int64_t x_stride, int64_t cols,
             int64_t n_tokens, int64_t t_begin, int64_t t_end, uint8_t* xq) {
  const Layout l = MakeLayout(type, cols, n_tokens);
  auto* sums = reinterpret_cast<float*>(xq + l.sums_offset);
  for (int64_t t = t_begin; t < t_end; ++t) {
    uint8_t* base = xq + t * l.tok_bytes;
    auto* q = reinterpret_cast<int8_t*>(base);
    auto* d = reinterpret_cast<float*>(base + l.scale_offset);
    auto* corr = reinterpret_cast<int32_t*>(base + l.corr_offset);
    for (int64_t b = 0; b < l.nb; ++b) {
      int32_t s;
      d[b] = QuantizeBlock(x + t * x_stride + b * 32, q + b * 32, &s);
      if (type == DType::kQ4_1)
        sums[b * n_tokens + t] = d[b] * static_cast<float>(s);
      if (type == DType::kQ4_0) {  // -8 * (sum of the 4 values of each lane)
        const __m256i qv =
            _mm256_load_si256(reinterpret_cast<const __m256i*>(q + b * 32));
        const __m256i s4 =
            _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), qv),
                              _mm256_set1_epi16(1));
        _mm256_store_si256(reinterpret_cast<__m256i*>(corr + b * 8),
                           _mm256_mullo_epi32(s4, _mm256_set1_epi32(-8)));
      }
    }
  }
}

inline __m256i LoadNibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(raw),
                                               _mm_srli_epi16(raw, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

template <DType kType, int R, int T>
void QuantTile(const MatMulArgs& a, const Layout& l, int64_t r0, int64_t t0) {
  const WeightView& w = *a.w;
  __m256 acc[R][T];
  float accm[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      acc[r][t] = _mm256_setzero_ps();
      accm[r][t] = 0.0f;
    }
  }
  const uint8_t* xt[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) xt[t] = a.xq + (t0 + t) * l.tok_bytes;
  const float* sums = reinterpret_cast<const float*>(a.xq + l.sums_offset);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < l.nb; ++b) {
    __m256i xv[T];
    __m256 xs[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      xv[t] =
          _mm256_load_si256(reinterpret_cast<const __m256i*>(xt[t] + b * 32));
      xs[t] = _mm256_broadcast_ss(
          reinterpret_cast<const float*>(xt[t] + l.scale_offset) + b);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w.row(r0 + r);
      // Fetch ahead in the weight stream (four row tiles on) into L2.
      if (t0 == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(row) + 16 * w.row_bytes +
                         b * (w.row_bytes / l.nb),
                     _MM_HINT_T1);
      }
      __m256i wv;
      float dw;
      float mw = 0.0f;
      if constexpr (kType == DType::kQ8_0) {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
        wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
        dw = Half(blk->d);
      } else if constexpr (kType == DType::kQ4_0) {
        const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
        wv = LoadNibbles(blk->qs);
        dw = Half(blk->d);
      } else {
        const auto* blk = reinterpret_cast<const BlockQ4_1*>(row) + b;
        wv = LoadNibbles(blk->qs);
        dw = Half(blk->d);
        mw = Half(blk->m);
      }
      const __m256 ws = _mm256_set1_ps(dw);
      const __m256i wabs = kType == DType::kQ8_0 ? _mm256_abs_epi8(wv) : wv;
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        __m256i dot;
        if constexpr (kType == DType::kQ8_0) {
          dot = _mm256_madd_epi16(
              _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(xv[t], wv)), ones);
        } else {
          dot = _mm256_madd_epi16(_mm256_maddubs_epi16(wv, xv[t]), ones);
          if constexpr (kType == DType::kQ4_0) {
            dot = _mm256_add_epi32(
                dot, _mm256_load_si256(reinterpret_cast<const __m256i*>(
                         xt[t] + l.corr_offset + b * 32)));
          }
        }
        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                    _mm256_mul_ps(ws, xs[t]), acc[r][t]);
        if constexpr (kType == DType::kQ4_1) {
          accm[r][t] = std::fma(mw, sums[b * a.n_tokens + t0 + t], accm[r][t]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc[r][t]),
                                  _mm256_extractf128_ps(acc[r][t], 1));
      const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
      const __m128 s = _mm_add_ss(q, _mm_movehdup_ps(q));
      a.y[(t0 + t) * a.y_stride + r0 + r] = _mm_cvtss_f32(s) + accm[r][t];
    }
  }
}


// Loads 8 weights starting at element i; `n` < 8 loads a zero-padded tail.
template <DType kType>
inline __m256 LoadW(const uint8_t* row, int64_t i, int64_t n) {
  constexpr int kSize = kType == DType::kF32 ? 4 : 2;
  const uint8_t* src = row + i * kSize;
  alignas(32) uint8_t tmp[32];
  if (n < 8) {
    std::memset(tmp, 0, sizeof(tmp));
    std::memcpy(tmp, src, n * kSize);
    src = tmp;
  }
  if constexpr (kType == DType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(src));
  } else if constexpr (kType == DType::kF16) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  } else {
    const __m256i v = _mm256_cvtepu16_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
}

inline __m256 LoadX(const float* x, int64_t n) {
  if (n >= 8) return _mm256_loadu_ps(x);
  alignas(32) float tmp[8] = {};
  std::memcpy(tmp, x, n * 4);
  return _mm256_load_ps(tmp);
}

template <DType kType, int R, int T>
void FloatTile(const MatMulArgs& a, const Layout&, int64_t r0, int64_t t0) {
  const WeightView& w = *a.w;
  __m256 acc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < w.cols; i += 8) {
    const int64_t n = std::min<int64_t>(8, w.cols - i);
    __m256 xv[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
      xv[t] = LoadX(a.x + (t0 + t) * a.x_stride + i, n);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if (i % 16 == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(w.row(r0 + r)) +
                         8 * w.row_bytes + i * (kType == DType::kF32 ? 4 : 2),
                     _MM_HINT_T0);
      }
      const __m256 wv = LoadW<kType>(w.row(r0 + r), i, n);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t)
        acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
      a.y[(t0 + t) * a.y_stride + r0 + r] = HSum(acc[r][t]);
  }
}

template <DType kType, int R, int T>
void Tile(const MatMulArgs& a, const Layout& l, int64_t r0, int64_t t0) {
  if constexpr (IsQuantized(kType)) {
    QuantTile<kType, R, T>(a, l, r0, t0);
  } else {
    FloatTile<kType, R, T>(a, l, r0, t0);
  }
}

using TileFn = void (*)(const MatMulArgs&, const Layout&, int64_t, int64_t);

template <DType kType, int R, int... Ts>
constexpr auto TileRow(std::integer_sequence<int, Ts...>) {
  return std::array<TileFn, sizeof...(Ts)>{&Tile<kType, R, Ts + 1>...};
}

template <DType kType, int... Rs>
constexpr auto TileTable(std::integer_sequence<int, Rs...>) {
  return std::array<std::array<TileFn, kTokTile>, sizeof...(Rs)>{
      TileRow<kType, Rs + 1>(std::make_integer_sequence<int, kTokTile>())...};
}

template <DType kType>
void RowsTyped(const MatMulArgs& a, int64_t row_begin, int64_t row_end) {
  static constexpr auto kTable =
      TileTable<kType>(std::make_integer_sequence<int, kRowTile>());
  const Layout l = MakeLayout(kType, a.w->cols, a.n_tokens);
  // Rows are taken in chunks of ~128 KiB of weights (L2-resident); within a
  // chunk every token tile sweeps all row tiles, so a token tile's
  // activations stay in L1 while the chunk's weights are re-read from L2.
  const int64_t chunk = std::max<int64_t>(
      kRowTile,
      (128 << 10) / std::max<int64_t>(1, a.w->row_bytes) / kRowTile * kRowTile);
  for (int64_t c0 = row_begin; c0 < row_end; c0 += chunk) {
    const int64_t c1 = std::min(row_end, c0 + chunk);
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kTokTile) {
      const int64_t nt = std::min<int64_t>(kTokTile, a.n_tokens - t0);
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
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 =
        _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8),
                           _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 =
        _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  }
  float s = HSum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

void Axpy(float alpha, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i),
                                            _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(alpha, x[i], y[i]);
}

// exp(x) for |x| <= 87 (Cephes expf, as in the AVX-512 file); clamped
// outside so that 2^n stays a normal float.
inline __m256 Exp(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)),
                    _mm256_set1_ps(87.0f));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500E-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r),
                      _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// Loads / stores the first min(8, left) floats (zero-filled).
inline __m256i TailMask(int64_t left) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(
      _mm256_set1_epi32(static_cast<int>(std::min<int64_t>(8, left))), idx);
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = TailMask(n - i);
    const __m256 g = _mm256_maskload_ps(gate + i, m);
    const __m256 u = _mm256_maskload_ps(up + i, m);
    const __m256 silu = _mm256_div_ps(
        g, _mm256_add_ps(one, Exp(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    _mm256_maskstore_ps(out + i, m, _mm256_mul_ps(silu, u));
  }
}

void GeluTanh(const float* x, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 minus_two_c = _mm256_set1_ps(-2.0f * 0.7978845608028654f);
  const __m256 cubic = _mm256_set1_ps(0.044715f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = TailMask(n - i);
    const __m256 v = _mm256_maskload_ps(x + i, m);
    const __m256 inner =
        _mm256_fmadd_ps(_mm256_mul_ps(cubic, v), _mm256_mul_ps(v, v), v);
    const __m256 e = Exp(_mm256_mul_ps(minus_two_c, inner));
    _mm256_maskstore_ps(out + i, m, _mm256_div_ps(v, _mm256_add_ps(one, e)));
  }
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  __m256 vmax = _mm256_set1_ps(neg_inf);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = TailMask(n - i);
    vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(_mm256_set1_ps(neg_inf),
                                                _mm256_maskload_ps(x + i, m),
                                                _mm256_castsi256_ps(m)));
  }
  __m128 h =
      _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const __m256 max = _mm256_set1_ps(_mm_cvtss_f32(h));
  __m256 sum = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = TailMask(n - i);
    const __m256 e =
        _mm256_and_ps(Exp(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), max)),
                      _mm256_castsi256_ps(m));
    _mm256_maskstore_ps(x + i, m, e);
    sum = _mm256_add_ps(sum, e);
  }
  const __m256 inv = _mm256_set1_ps(1.0f / HSum(sum));
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = TailMask(n - i);
    _mm256_maskstore_ps(x + i, m,
                        _mm256_mul_ps(_mm256_maskload_ps(x + i, m), inv));
  }
}

// The exps are summed in f64 (no error growth with n); NaN anywhere gives
// NaN, a max of +-inf gives that infinity.
float LogSumExp(const float* x, int64_t n) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (n <= 0) return neg_inf;
  __m256 vmax = _mm256_set1_ps(neg_inf);
  __m256 nan = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = TailMask(n - i);
    const __m256 v = _mm256_maskload_ps(x + i, m);  // 0 outside the mask
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(_mm256_set1_ps(neg_inf), v,
                                                _mm256_castsi256_ps(m)));
  }
  if (_mm256_movemask_ps(nan) != 0) {
    return std::numeric_limits<float>::quiet_NaN();
  }
  __m128 h =
      _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float max_s = _mm_cvtss_f32(h);
  if (std::isinf(max_s)) return max_s;
  const __m256 max = _mm256_set1_ps(max_s);
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = TailMask(n - i);
    const __m256 e =
        _mm256_and_ps(Exp(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), max)),
                      _mm256_castsi256_ps(m));
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(s0, s1));
  return LogSumExpFinish(max_s, (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]));
}

}  // namespace

const IsaKernels& Avx2Kernels() {
  static const IsaKernels k{"avx2",   kRowTile,  &PreparedBytes, &Prepare,
                            &Rows,    &Dot,      &Axpy,          &SwiGlu,
                            &Softmax, &LogSumExp, &ArgMaxScalar,  &GeluTanh,
                            &Avx2PackedKernels()};
  return k;
}

}  // namespace pdserve::kernels_internal
