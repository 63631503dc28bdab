// AVX2 kernels over weights repacked at load (PackFormat::kAvx2Rows8): rows
// are interleaved in groups of 8 so that one ymm holds the same columns of 8
// rows, and a product yields 8 outputs per vector without horizontal sums.
//
// Quantized layout, per group of 8 rows (the last group zero-padded), with
// nb = cols / 32 blocks per row:
//   qs:     nb x QB bytes. Q4_0 / Q4_1 (QB = 128): chunk j < 4 of block b is
//           32 bytes, row r's original bytes qs[4j .. 4j + 4) at [4r, 4r + 4)
//           (low nibbles = values 4j..4j+3, high = values 16+4j..16+4j+3).
//           Q8_0 (QB = 256): chunk k < 8 holds row r's values 4k..4k+3 at
//           [4r, 4r + 4).
//   scales: nb x 8 f16 d (Q4_1: then nb x 8 f16 m), padded to 64 bytes.
// Activations are quantized per token to Q8 blocks (d = amax / 127, as the
// row-major kernels do); each (block, token) is an exact int32 dot per row
// (vpmaddubsw over 4-byte groups broadcast to all rows), then
//   acc_r = fma(float(dot_r), d_r * d_x, acc_r)   [Q4_1: + fma(m_r, d_x*s_x)]
// in block order, so a row's result depends only on the row and the token.
//
// Float layout (F16, BF16), per group of 8 rows: for each column pair
// (k, k+1) 32 bytes. BF16: one dword per row, column k in its low half and
// k+1 in its high half (a shift or a mask gives the f32 of k / k+1);
// F16: [k: rows 0-7][k+1: rows 0-7]. Columns are padded to even. Each
// (row, token) sums columns in blocks of kFloatBlock: a block's partial is a
// sequential fma chain from 0, added to the total in block order.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "kernels/matmul_avx2_internal.h"
#include "kernels/matmul_internal.h"

namespace pdserve::kernels_internal {
namespace {

using avx2::Half;
using avx2::QuantizeBlock;

constexpr int64_t kGroupRows = 8;
constexpr int64_t kFloatBlock = 64;  // columns per partial sum (even)
// Software prefetch distance ahead of each weight stream.
constexpr int64_t kPrefetchBytes = 1024;

int64_t RoundUp(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

template <DType kType>
constexpr int64_t kQsBytes = kType == DType::kQ8_0 ? 256 : 128;
template <DType kType>
constexpr int64_t kScaleBytes = kType == DType::kQ4_1 ? 32 : 16;

// Bytes of one packed group of 8 rows.
int64_t GroupBytes(DType type, int64_t cols) {
  const int64_t nb = cols / 32;
  switch (type) {
    case DType::kQ4_0:
      return RoundUp(nb * (128 + 16), 64);
    case DType::kQ4_1:
      return RoundUp(nb * (128 + 32), 64);
    case DType::kQ8_0:
      return RoundUp(nb * (256 + 16), 64);
    case DType::kF16:
    case DType::kBF16:
      return RoundUp(RoundUp(cols, 2) * 16, 64);
    default:
      return 0;
  }
}

int64_t PackedBytes(DType type, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  if (IsQuantized(type) && cols % 32 != 0) return 0;
  return GroupBytes(type, cols) * ((rows + kGroupRows - 1) / kGroupRows);
}

// ---------------------------------------------------------------- packing

void PackQuantGroup(const WeightView& w, int64_t r0, uint8_t* dst) {
  const int64_t nb = w.cols / 32;
  const bool q8 = w.type == DType::kQ8_0;
  const int64_t qb = q8 ? 256 : 128;
  uint8_t* qs = dst;
  auto* d = reinterpret_cast<uint16_t*>(dst + nb * qb);
  auto* m = d + nb * 8;  // Q4_1 only
  for (int64_t r = 0; r < kGroupRows; ++r) {
    const bool real = r0 + r < w.rows;
    const uint8_t* row = real ? w.row(r0 + r) : nullptr;
    for (int64_t b = 0; b < nb; ++b) {
      uint16_t scale = 0, min = 0;
      const uint8_t* src = nullptr;
      if (real && w.type == DType::kQ8_0) {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
        scale = blk->d;
        src = reinterpret_cast<const uint8_t*>(blk->qs);
      } else if (real && w.type == DType::kQ4_0) {
        const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
        scale = blk->d;
        src = blk->qs;
      } else if (real) {
        const auto* blk = reinterpret_cast<const BlockQ4_1*>(row) + b;
        scale = blk->d;
        min = blk->m;
        src = blk->qs;
      }
      d[b * 8 + r] = scale;
      if (w.type == DType::kQ4_1) m[b * 8 + r] = min;
      // Q4 rows have 16 bytes (4 chunks), Q8 rows 32 (8 chunks).
      const int64_t chunks = q8 ? 8 : 4;
      for (int64_t j = 0; j < chunks; ++j) {
        uint8_t* out = qs + b * qb + j * 32 + r * 4;
        if (src != nullptr) {
          std::memcpy(out, src + 4 * j, 4);
        } else {
          // Padding rows: zero values (Q4 nibbles 0 with scale 0).
          std::memset(out, 0, 4);
        }
      }
    }
  }
}

void PackFloatGroup(const WeightView& w, int64_t r0, uint8_t* dst) {
  const int64_t pairs = RoundUp(w.cols, 2) / 2;
  auto* out = reinterpret_cast<uint16_t*>(dst);
  auto value = [&](int64_t r, int64_t k) -> uint16_t {
    if (r0 + r >= w.rows || k >= w.cols) return 0;
    uint16_t v;
    std::memcpy(&v, w.row(r0 + r) + 2 * k, 2);
    return v;
  };
  for (int64_t p = 0; p < pairs; ++p) {
    uint16_t* o = out + p * 16;
    for (int64_t r = 0; r < 8; ++r) {
      if (w.type == DType::kBF16) {
        // Row r's dword: column k in the low half, k+1 in the high half.
        o[2 * r] = value(r, 2 * p);
        o[2 * r + 1] = value(r, 2 * p + 1);
      } else {
        o[r] = value(r, 2 * p);
        o[8 + r] = value(r, 2 * p + 1);
      }
    }
  }
}

void Pack(const WeightView& w, uint8_t* dst) {
  const int64_t gb = GroupBytes(w.type, w.cols);
  const int64_t groups = (w.rows + kGroupRows - 1) / kGroupRows;
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* out = dst + g * gb;
    std::memset(out, 0, gb);
    if (IsQuantized(w.type)) {
      PackQuantGroup(w, g * kGroupRows, out);
    } else {
      PackFloatGroup(w, g * kGroupRows, out);
    }
  }
}

// ------------------------------------------------- prepared activations

// Per token: nb blocks of 32 int8 (natural order), nb f32 scales d_x, then
// nb per-block sums: Q4_0 int32 8 * sum(q); Q4_1 f32 d_x * sum(q).
struct Layout {
  int64_t nb;
  int64_t scale_offset;
  int64_t sum_offset;
  int64_t tok_bytes;
};

Layout MakeLayout(int64_t cols) {
  Layout l;
  l.nb = cols / 32;
  l.scale_offset = l.nb * 32;
  l.sum_offset = l.scale_offset + l.nb * 4;
  l.tok_bytes = RoundUp(l.sum_offset + l.nb * 4, 32);
  return l;
}

int64_t PreparedBytes(DType, int64_t cols, int64_t n_tokens) {
  return MakeLayout(cols).tok_bytes * n_tokens;
}

void Prepare(DType type, const float* x, int64_t x_stride, int64_t cols,
             int64_t, int64_t t_begin, int64_t t_end, uint8_t* xq) {
  const Layout l = MakeLayout(cols);
  for (int64_t t = t_begin; t < t_end; ++t) {
    uint8_t* base = xq + t * l.tok_bytes;
    auto* q = reinterpret_cast<int8_t*>(base);
    auto* d = reinterpret_cast<float*>(base + l.scale_offset);
    auto* si = reinterpret_cast<int32_t*>(base + l.sum_offset);
    auto* sf = reinterpret_cast<float*>(base + l.sum_offset);
    for (int64_t b = 0; b < l.nb; ++b) {
      int32_t s;
      d[b] = QuantizeBlock(x + t * x_stride + b * 32, q + b * 32, &s);
      if (type == DType::kQ4_0) si[b] = 8 * s;
      if (type == DType::kQ4_1) sf[b] = d[b] * static_cast<float>(s);
    }
  }
}

// ------------------------------------------------------ quantized tiles

// Stops the compiler from re-associating an integer accumulation across
// loop iterations (it would compute every product first and spill them).
inline void KeepInRegister(__m256i& v) { __asm__("" : "+x"(v)); }

inline __m256i Bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

inline void Store8(float* y, int64_t n, __m256 v) {
  if (n >= 8) {
    _mm256_storeu_ps(y, v);
  } else {
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, v);
    std::memcpy(y, tmp, n * sizeof(float));
  }
}

// R groups of 8 rows (gb bytes apart) x T tokens. Several groups at once
// read several memory streams in parallel (a decode step is bound by DRAM
// latency per stream on small machines); rows past w.rows are not stored.
template <DType kType, int R, int T>
void QuantTile(const MatMulArgs& a, const Layout& l, const uint8_t* group,
               int64_t gb, int64_t r0, int64_t t0) {
  static_assert(R * T <= 4, "accumulators must fit in the ymm registers");
  constexpr int64_t kQb = kQsBytes<kType>;
  const int8_t* xt[T];
  const float* dx[T];
  const void* sx[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    const uint8_t* base = a.xq + (t0 + t) * l.tok_bytes;
    xt[t] = reinterpret_cast<const int8_t*>(base);
    dx[t] = reinterpret_cast<const float*>(base + l.scale_offset);
    sx[t] = base + l.sum_offset;
  }
  __m256 acc[R][T];
#pragma GCC unroll 4
  for (int g = 0; g < R; ++g) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[g][t] = _mm256_setzero_ps();
  }
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const int64_t prefetch_step = (R * gb + l.nb - 1) / l.nb;
  for (int64_t b = 0; b < l.nb; ++b) {
    __m256i dot[R][T];
    // The R groups of the next tile (contiguous after this one) into L2, in
    // step with this tile's progress: each thread's rows are one stream.
    for (int64_t off = b * prefetch_step; off < (b + 1) * prefetch_step;
         off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(group) + R * gb + off,
                   _MM_HINT_T1);
    }
    if constexpr (kType == DType::kQ8_0) {
#pragma GCC unroll 4
      for (int g = 0; g < R; ++g) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) dot[g][t] = _mm256_setzero_si256();
      }
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
#pragma GCC unroll 4
        for (int g = 0; g < R; ++g) {
          const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(
              group + g * gb + b * kQb + 32 * k));
          const __m256i wabs = _mm256_abs_epi8(wv);
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) {
            const __m256i xs =
                _mm256_sign_epi8(Bcast4(xt[t] + b * 32 + 4 * k), wv);
            dot[g][t] = _mm256_add_epi32(
                dot[g][t],
                _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, xs), ones));
            KeepInRegister(dot[g][t]);
          }
        }
      }
    } else {
      // Nibbles times int8 stay within int16 for all 8 groups of a block:
      // |sum| <= 8 * 2 * 15 * 127 = 30,480.
      __m256i s16[R][T];
#pragma GCC unroll 4
      for (int g = 0; g < R; ++g) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) s16[g][t] = _mm256_setzero_si256();
      }
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
#pragma GCC unroll 4
        for (int g = 0; g < R; ++g) {
          const __m256i raw = _mm256_load_si256(
              reinterpret_cast<const __m256i*>(group + g * gb + b * kQb + 32 * j));
          const __m256i lo = _mm256_and_si256(raw, low4);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) {
            const int8_t* xb = xt[t] + b * 32;
            s16[g][t] = _mm256_add_epi16(
                s16[g][t], _mm256_maddubs_epi16(lo, Bcast4(xb + 4 * j)));
            s16[g][t] = _mm256_add_epi16(
                s16[g][t], _mm256_maddubs_epi16(hi, Bcast4(xb + 16 + 4 * j)));
            KeepInRegister(s16[g][t]);
          }
        }
      }
#pragma GCC unroll 4
      for (int g = 0; g < R; ++g) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          dot[g][t] = _mm256_madd_epi16(s16[g][t], ones);
          if constexpr (kType == DType::kQ4_0) {
            dot[g][t] = _mm256_sub_epi32(
                dot[g][t],
                _mm256_set1_epi32(static_cast<const int32_t*>(sx[t])[b]));
          }
        }
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < R; ++g) {
      const auto* scales =
          reinterpret_cast<const __m128i*>(group + g * gb + l.nb * kQb);
      const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(scales + b));
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        acc[g][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[g][t]),
                                    _mm256_mul_ps(dw, _mm256_set1_ps(dx[t][b])),
                                    acc[g][t]);
      }
      if constexpr (kType == DType::kQ4_1) {
        const __m256 mw = _mm256_cvtph_ps(_mm_load_si128(scales + l.nb + b));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          acc[g][t] = _mm256_fmadd_ps(
              mw, _mm256_set1_ps(static_cast<const float*>(sx[t])[b]),
              acc[g][t]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < R; ++g) {
    const int64_t row = r0 + g * kGroupRows;
    const int64_t n = std::min<int64_t>(kGroupRows, a.w->rows - row);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      Store8(a.y + (t0 + t) * a.y_stride + row, n, acc[g][t]);
    }
  }
}

// ---------------------------------------------------------- float tiles

// f32 of column k (kHi = false) or k+1 (kHi = true) of 8 rows from the
// 32-byte pair at p.
template <DType kType, bool kHi>
inline __m256 LoadColumn(const uint8_t* p) {
  if constexpr (kType == DType::kBF16) {
    const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
    return _mm256_castsi256_ps(
        kHi ? _mm256_and_si256(v, _mm256_set1_epi32(0xffff0000u))
            : _mm256_slli_epi32(v, 16));
  } else {
    return _mm256_cvtph_ps(
        _mm_load_si128(reinterpret_cast<const __m128i*>(p + (kHi ? 16 : 0))));
  }
}

// f32 of columns k and k+1 of 8 rows from the 32-byte pair at p.
template <DType kType>
inline void LoadPair(const uint8_t* p, __m256* lo, __m256* hi) {
  *lo = LoadColumn<kType, false>(p);
  *hi = LoadColumn<kType, true>(p);
}

// R groups of 8 rows x T tokens; columns [0, cols) in blocks of kFloatBlock.
// The block partials live in registers (R * T <= 12), the totals in L1.
template <DType kType, int R, int T>
void FloatTile(const MatMulArgs& a, const uint8_t* group, int64_t group_bytes,
               int64_t r0, int64_t t0) {
  static_assert(R * T <= 12, "partials must fit in the ymm registers");
  const int64_t cols = a.w->cols;
  const float* x[T];
#pragma GCC unroll 12
  for (int t = 0; t < T; ++t) x[t] = a.x + (t0 + t) * a.x_stride;
  alignas(32) float total[R][T][8] = {};
  for (int64_t k0 = 0; k0 < cols; k0 += kFloatBlock) {
    const int64_t k1 = std::min(cols, k0 + kFloatBlock);
    // The next tile's groups into L2, in step with this tile's progress.
    for (int64_t off = k0 * 16 * R; off < k1 * 16 * R; off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(group) + R * group_bytes + off,
                   _MM_HINT_T1);
    }
    __m256 p[R][T];
#pragma GCC unroll 4
    for (int g = 0; g < R; ++g) {
#pragma GCC unroll 12
      for (int t = 0; t < T; ++t) p[g][t] = _mm256_setzero_ps();
    }
    int64_t k = k0;
    for (; k + 2 <= k1; k += 2) {
#pragma GCC unroll 4
      for (int g = 0; g < R; ++g) {
        const uint8_t* src = group + g * group_bytes + k * 16;
        _mm_prefetch(reinterpret_cast<const char*>(src) + kPrefetchBytes,
                     _MM_HINT_T0);
        __m256 wlo, whi;
        LoadPair<kType>(src, &wlo, &whi);
#pragma GCC unroll 12
        for (int t = 0; t < T; ++t) {
          p[g][t] =
              _mm256_fmadd_ps(wlo, _mm256_broadcast_ss(x[t] + k), p[g][t]);
          p[g][t] =
              _mm256_fmadd_ps(whi, _mm256_broadcast_ss(x[t] + k + 1), p[g][t]);
        }
      }
    }
    if (k < k1) {  // odd column count: the last column alone
#pragma GCC unroll 4
      for (int g = 0; g < R; ++g) {
        const __m256 wlo =
            LoadColumn<kType, false>(group + g * group_bytes + k * 16);
#pragma GCC unroll 12
        for (int t = 0; t < T; ++t) {
          p[g][t] =
              _mm256_fmadd_ps(wlo, _mm256_broadcast_ss(x[t] + k), p[g][t]);
        }
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < R; ++g) {
#pragma GCC unroll 12
      for (int t = 0; t < T; ++t) {
        _mm256_store_ps(total[g][t],
                        _mm256_add_ps(_mm256_load_ps(total[g][t]), p[g][t]));
      }
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < R; ++g) {
    const int64_t row = r0 + g * kGroupRows;
    const int64_t n = std::min<int64_t>(kGroupRows, a.w->rows - row);
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) {
      Store8(a.y + (t0 + t) * a.y_stride + row, n,
             _mm256_load_ps(total[g][t]));
    }
  }
}

// The steady-state GEMM tile: 2 groups x 6 tokens, written out so that the
// 12 partials, 2 weight columns and 1 broadcast stay in the 16 ymm
// registers (the generic template above spills at this size). Bitwise the
// same arithmetic per (row, token) as FloatTile.
template <DType kType>
void FloatTile2x6(const MatMulArgs& a, const uint8_t* group, int64_t gb,
                  int64_t r0, int64_t t0) {
  const int64_t cols = a.w->cols;
  const float* x0 = a.x + t0 * a.x_stride;
  const float* x1 = x0 + a.x_stride;
  const float* x2 = x1 + a.x_stride;
  const float* x3 = x2 + a.x_stride;
  const float* x4 = x3 + a.x_stride;
  const float* x5 = x4 + a.x_stride;
  alignas(32) float total[12][8] = {};
  for (int64_t k0 = 0; k0 < cols; k0 += kFloatBlock) {
    const int64_t k1 = std::min(cols, k0 + kFloatBlock);
    for (int64_t off = k0 * 32; off < k1 * 32; off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(group) + 2 * gb + off,
                   _MM_HINT_T1);
    }
    __m256 p00 = _mm256_setzero_ps(), p01 = p00, p02 = p00, p03 = p00,
           p04 = p00, p05 = p00, p10 = p00, p11 = p00, p12 = p00, p13 = p00,
           p14 = p00, p15 = p00;
    __m256 w0, w1, b;
#define PDSERVE_FMA_COLUMN(kk)                                          \
  b = _mm256_broadcast_ss(x0 + (kk));                                   \
  p00 = _mm256_fmadd_ps(w0, b, p00);                                    \
  p10 = _mm256_fmadd_ps(w1, b, p10);                                    \
  b = _mm256_broadcast_ss(x1 + (kk));                                   \
  p01 = _mm256_fmadd_ps(w0, b, p01);                                    \
  p11 = _mm256_fmadd_ps(w1, b, p11);                                    \
  b = _mm256_broadcast_ss(x2 + (kk));                                   \
  p02 = _mm256_fmadd_ps(w0, b, p02);                                    \
  p12 = _mm256_fmadd_ps(w1, b, p12);                                    \
  b = _mm256_broadcast_ss(x3 + (kk));                                   \
  p03 = _mm256_fmadd_ps(w0, b, p03);                                    \
  p13 = _mm256_fmadd_ps(w1, b, p13);                                    \
  b = _mm256_broadcast_ss(x4 + (kk));                                   \
  p04 = _mm256_fmadd_ps(w0, b, p04);                                    \
  p14 = _mm256_fmadd_ps(w1, b, p14);                                    \
  b = _mm256_broadcast_ss(x5 + (kk));                                   \
  p05 = _mm256_fmadd_ps(w0, b, p05);                                    \
  p15 = _mm256_fmadd_ps(w1, b, p15);
    int64_t k = k0;
    for (; k + 2 <= k1; k += 2) {
      const uint8_t* src = group + k * 16;
      _mm_prefetch(reinterpret_cast<const char*>(src) + kPrefetchBytes,
                   _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(src + gb) + kPrefetchBytes,
                   _MM_HINT_T0);
      w0 = LoadColumn<kType, false>(src);
      w1 = LoadColumn<kType, false>(src + gb);
      PDSERVE_FMA_COLUMN(k)
      w0 = LoadColumn<kType, true>(src);
      w1 = LoadColumn<kType, true>(src + gb);
      PDSERVE_FMA_COLUMN(k + 1)
    }
    if (k < k1) {  // odd column count: the last column alone
      w0 = LoadColumn<kType, false>(group + k * 16);
      w1 = LoadColumn<kType, false>(group + k * 16 + gb);
      PDSERVE_FMA_COLUMN(k)
    }
#undef PDSERVE_FMA_COLUMN
    const __m256 parts[12] = {p00, p01, p02, p03, p04, p05,
                              p10, p11, p12, p13, p14, p15};
    for (int i = 0; i < 12; ++i) {
      _mm256_store_ps(total[i],
                      _mm256_add_ps(_mm256_load_ps(total[i]), parts[i]));
    }
  }
  for (int g = 0; g < 2; ++g) {
    const int64_t row = r0 + g * kGroupRows;
    const int64_t n = std::min<int64_t>(kGroupRows, a.w->rows - row);
    for (int t = 0; t < 6; ++t) {
      Store8(a.y + (t0 + t) * a.y_stride + row, n,
             _mm256_load_ps(total[g * 6 + t]));
    }
  }
}

// ------------------------------------------------------------ row loops

constexpr int kQuantTokTile = 4;
constexpr int kFloatTokTile = 6;
// L2-resident share of the weights that every token tile sweeps.
constexpr int64_t kChunkBytes = 192 << 10;

template <DType kType, int R, int... Ts>
constexpr auto QuantTable(std::integer_sequence<int, Ts...>) {
  using Fn = void (*)(const MatMulArgs&, const Layout&, const uint8_t*,
                      int64_t, int64_t, int64_t);
  return std::array<Fn, sizeof...(Ts)>{&QuantTile<kType, R, Ts + 1>...};
}

// Rows [c0, c1) for tokens [t0, t0 + nt): 4 groups at once for one token
// (decode), 2 for two, else one group of up to 4 tokens.
template <DType kType>
void QuantTokenTile(const MatMulArgs& a, const Layout& l, int64_t c0,
                    int64_t c1, int64_t t0, int64_t nt) {
  static constexpr auto k1 =
      QuantTable<kType, 1>(std::make_integer_sequence<int, kQuantTokTile>());
  static constexpr auto k2 =
      QuantTable<kType, 2>(std::make_integer_sequence<int, 2>());
  static constexpr auto k4 =
      QuantTable<kType, 4>(std::make_integer_sequence<int, 1>());
  const int64_t gb = GroupBytes(kType, a.w->cols);
  const auto* packed = static_cast<const uint8_t*>(a.w->packed);
  auto at = [&](int64_t r) { return packed + r / kGroupRows * gb; };
  int64_t r0 = c0;
  if (nt == 1) {
    for (; r0 + 4 * kGroupRows <= c1; r0 += 4 * kGroupRows)
      k4[0](a, l, at(r0), gb, r0, t0);
  }
  if (nt <= 2) {
    for (; r0 + 2 * kGroupRows <= c1; r0 += 2 * kGroupRows)
      k2[nt - 1](a, l, at(r0), gb, r0, t0);
  }
  for (; r0 < c1; r0 += kGroupRows) k1[nt - 1](a, l, at(r0), gb, r0, t0);
}

template <DType kType>
void QuantRows(const MatMulArgs& a, int64_t row_begin, int64_t row_end) {
  const Layout l = MakeLayout(a.w->cols);
  const int64_t gb = GroupBytes(kType, a.w->cols);
  const int64_t chunk =
      std::max<int64_t>(4, kChunkBytes / gb) / 4 * 4 * kGroupRows;
  for (int64_t c0 = row_begin; c0 < row_end; c0 += chunk) {
    const int64_t c1 = std::min(row_end, c0 + chunk);
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kQuantTokTile) {
      QuantTokenTile<kType>(
          a, l, c0, c1, t0, std::min<int64_t>(kQuantTokTile, a.n_tokens - t0));
    }
  }
}

template <DType kType, int R, int... Ts>
constexpr auto FloatTable(std::integer_sequence<int, Ts...>) {
  using Fn =
      void (*)(const MatMulArgs&, const uint8_t*, int64_t, int64_t, int64_t);
  return std::array<Fn, sizeof...(Ts)>{&FloatTile<kType, R, Ts + 1>...};
}

// Rows [c0, c1) for tokens [t0, t0 + nt): as many groups at once as the
// tile's partials allow (4 for up to 3 tokens, else 2), then the rest.
template <DType kType>
void FloatTokenTile(const MatMulArgs& a, int64_t c0, int64_t c1, int64_t t0,
                    int64_t nt) {
  static constexpr auto k4 =
      FloatTable<kType, 4>(std::make_integer_sequence<int, 3>());
  static constexpr auto k2 =
      FloatTable<kType, 2>(std::make_integer_sequence<int, kFloatTokTile>());
  static constexpr auto k1 =
      FloatTable<kType, 1>(std::make_integer_sequence<int, kFloatTokTile>());
  const int64_t gb = GroupBytes(kType, a.w->cols);
  const auto* packed = static_cast<const uint8_t*>(a.w->packed);
  auto at = [&](int64_t r) { return packed + r / kGroupRows * gb; };
  int64_t r0 = c0;
  if (nt <= 3) {
    for (; r0 + 4 * kGroupRows <= c1; r0 += 4 * kGroupRows)
      k4[nt - 1](a, at(r0), gb, r0, t0);
  }
  for (; r0 + 2 * kGroupRows <= c1; r0 += 2 * kGroupRows) {
    if (nt == 6) {
      FloatTile2x6<kType>(a, at(r0), gb, r0, t0);
    } else {
      k2[nt - 1](a, at(r0), gb, r0, t0);
    }
  }
  for (; r0 < c1; r0 += kGroupRows) k1[nt - 1](a, at(r0), gb, r0, t0);
}

template <DType kType>
void FloatRows(const MatMulArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t gb = GroupBytes(kType, a.w->cols);
  const int64_t chunk =
      std::max<int64_t>(4, kChunkBytes / gb) / 4 * 4 * kGroupRows;
  for (int64_t c0 = row_begin; c0 < row_end; c0 += chunk) {
    const int64_t c1 = std::min(row_end, c0 + chunk);
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kFloatTokTile) {
      FloatTokenTile<kType>(
          a, c0, c1, t0, std::min<int64_t>(kFloatTokTile, a.n_tokens - t0));
    }
  }
}

void Rows(const MatMulArgs& a, int64_t row_begin, int64_t row_end) {
  VisitDType<DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
             DType::kQ4_1>(a.w->type, [&](auto t) {
    constexpr DType kType = decltype(t)::value;
    if constexpr (IsQuantized(kType)) {
      QuantRows<kType>(a, row_begin, row_end);
    } else {
      FloatRows<kType>(a, row_begin, row_end);
    }
  });
}

}  // namespace

const PackedKernels& Avx2PackedKernels() {
  static const PackedKernels k{PackFormat::kAvx2Rows8, kGroupRows,
                               &PackedBytes,           &Pack,
                               &PreparedBytes,         &Prepare,
                               &Rows};
  return k;
}

}  // namespace pdserve::kernels_internal
