// AVX-512 kernels over weights repacked at load (PackFormat::kAvx512Rows16):
// rows are interleaved in groups of 16 so that one zmm holds the same columns
// of 16 rows, and a product yields 16 outputs per vector without horizontal
// sums. Each group is one contiguous stream, which the hardware prefetchers
// follow (software prefetching of the next tile measured slower on Zen 5:
// Q8_0 2048 x 2048 mat-vec 26 -> 35 GB/s without it, F16 25 -> 30).
//
// Quantized layout (Q4_0, Q4_1, Q8_0), per group of 16 rows (the last group
// zero-padded), in pairs of blocks of 32 columns (an odd block count gets a
// zero block: scale 0, never NaN):
//   [block 2p qs | block 2p+1 qs | d: 2 x 16 f16 | (Q4_1) m: 2 x 16 f16]
//   Q4_x qs (256 bytes): vector j < 4 holds row r's original bytes
//     qs[4j .. 4j+4) at [4r, 4r+4): low nibbles = values 4j..4j+3, high
//     nibbles = values 16+4j..16+4j+3 (u8 0..15 after the mask).
//   Q8_0 qs (512 bytes): vector k < 8 holds row r's values 4k..4k+3 as
//     u8 = q + 128 at [4r, 4r+4).
// Activations are quantized once per call and token to Q8 blocks (d = amax /
// 127, bitwise as QuantizeActBlock); with their per-block correction c
// (Q4_0: -8 * sum q, Q8_0: -128 * sum q, which cancel the weights' offsets;
// Q4_1: d_x * sum q) each (row, token) is, for each block b in order:
//   D   = c_b + sum_i w_u8[i] * q[i]      (vpdpbusd, exact int32)
//   acc = fma(float(D), d_w,b * d_x,b, acc)   [Q4_1: acc = fma(m_b, c_b, acc)]
//
// Float layout (F16, BF16), per group of 16 rows and column pair (k, k+1),
// 64 bytes (columns padded to even with 0):
//   F16:  [column k: rows 0..15 | column k+1: rows 0..15]
//   BF16: row r's dword at [4r, 4r+4): column k in its low half, k+1 high.
// F16 (and BF16 without AVX512-BF16) widen the weights to f32 and fma against
// the f32 activations: exact products, f32 sums. BF16 with AVX512-BF16
// rounds the activations to bf16 once per call (round to nearest even) and
// uses vdpbf16ps on the column pairs (products exact, f32 sums; inputs'
// denormals read as 0). Either way each (row, token) sums its columns in
// blocks of kFloatBlock: a block's partial is an in-order chain from 0, added
// to the total in block order.
//
// So every output depends only on its row, its token and cols: bitwise the
// same whatever the batch, the token's position in it or the row range.
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "kernels/matmul_avx512_internal.h"
#include "kernels/matmul_internal.h"

namespace pdserve::kernels_internal {
namespace {

constexpr int64_t kGroupRows = 16;
// Threads split rows in single groups: the 4-group decode tile falls back
// to 2 or 1 groups at a range's end, and a matrix of a few hundred rows
// still splits evenly over the threads.
constexpr int64_t kTilesPerSplit512 = 1;
constexpr int64_t kFloatBlock = 128;  // columns per partial sum (even)
// Tokens per float tile (and per interleaved tile of bf16 activations).
constexpr int64_t kFloatTokTile = 12;
// Columns per sweep of a prefill over a wide float matrix (a multiple of
// kFloatBlock): 4 groups of 16 rows x 2,048 bf16 columns = 256 KiB.
constexpr int64_t kFloatColumnSpan = 2048;
// Weights per chunk of row groups: every token tile sweeps a chunk while it
// is L2-resident.
constexpr int64_t kChunkBytes = 384 << 10;

int64_t RoundUp(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

template <DType kType>
constexpr int64_t kQsBytes = kType == DType::kQ8_0 ? 512 : 256;
template <DType kType>
constexpr int64_t kPairBytes =
    2 * kQsBytes<kType> + (kType == DType::kQ4_1 ? 128 : 64);

int64_t PairBytes(DType type) {
  switch (type) {
    case DType::kQ4_0:
      return kPairBytes<DType::kQ4_0>;
    case DType::kQ4_1:
      return kPairBytes<DType::kQ4_1>;
    case DType::kQ8_0:
      return kPairBytes<DType::kQ8_0>;
    default:
      return 0;
  }
}

// Bytes of one packed group of 16 rows' data.
int64_t GroupDataBytes(DType type, int64_t cols) {
  if (IsQuantized(type)) return (cols / 32 + 1) / 2 * PairBytes(type);
  if (type == DType::kF16 || type == DType::kBF16)
    return RoundUp(cols, 2) / 2 * 64;
  return 0;
}

// Bytes from one group to the next: the data padded so that consecutive
// groups do not start at the same offset modulo 4 KiB (the decode tile reads
// 4 groups as 4 streams; streams a multiple of 4 KiB apart alias in the L1
// sets and conflict in DRAM banks: F16 / BF16 at 2048 columns streamed at
// half the rate). The stride modulo 4 KiB lands in [1 KiB, 1.25 KiB] or
// [2.75 KiB, 3 KiB], which spreads 4 groups over the 4 KiB period.
int64_t GroupBytes(DType type, int64_t cols) {
  int64_t gb = GroupDataBytes(type, cols);
  if (gb < 4096) return gb;
  for (;;) {
    const int64_t m = gb % 4096;
    if ((m >= 1024 && m <= 1280) || (m >= 2816 && m <= 3072)) return gb;
    gb += 64;
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
  const int64_t qb = w.type == DType::kQ8_0 ? 512 : 256;
  const int64_t pair = PairBytes(w.type);
  for (int64_t r = 0; r < kGroupRows && r0 + r < w.rows; ++r) {
    const uint8_t* row = w.row(r0 + r);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* base = dst + b / 2 * pair;
      uint8_t* qs = base + (b % 2) * qb;
      auto* d = reinterpret_cast<uint16_t*>(base + 2 * qb) + (b % 2) * 16;
      if (w.type == DType::kQ8_0) {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
        d[r] = blk->d;
        for (int k = 0; k < 8; ++k) {
          for (int i = 0; i < 4; ++i) {
            qs[k * 64 + r * 4 + i] =
                static_cast<uint8_t>(blk->qs[4 * k + i]) ^ 0x80;
          }
        }
      } else {
        const uint8_t* src;
        if (w.type == DType::kQ4_0) {
          const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
          d[r] = blk->d;
          src = blk->qs;
        } else {
          const auto* blk = reinterpret_cast<const BlockQ4_1*>(row) + b;
          d[r] = blk->d;
          d[32 + r] = blk->m;  // the m table follows both d tables
          src = blk->qs;
        }
        for (int j = 0; j < 4; ++j) std::memcpy(qs + j * 64 + r * 4, src + 4 * j, 4);
      }
    }
  }
}

void PackFloatGroup(const WeightView& w, int64_t r0, uint8_t* dst) {
  const int64_t pairs = RoundUp(w.cols, 2) / 2;
  auto* out = reinterpret_cast<uint16_t*>(dst);
  for (int64_t r = 0; r < kGroupRows && r0 + r < w.rows; ++r) {
    const uint8_t* row = w.row(r0 + r);
    for (int64_t p = 0; p < pairs; ++p) {
      uint16_t v[2] = {0, 0};
      std::memcpy(v, row + 4 * p, 2 * std::min<int64_t>(2, w.cols - 2 * p));
      uint16_t* o = out + p * 32;
      if (w.type == DType::kBF16) {
        o[2 * r] = v[0];
        o[2 * r + 1] = v[1];
      } else {
        o[r] = v[0];
        o[16 + r] = v[1];
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

// Quantized types, per token: np * 64 int8 values (natural order, the odd
// block's partner zero), then np * 2 f32 d_x, then np * 2 corrections
// (int32, Q4_1 f32).
struct QuantLayout {
  int64_t nb, np;
  int64_t scale_offset, corr_offset, tok_bytes;
};

QuantLayout MakeQuantLayout(int64_t cols) {
  QuantLayout l;
  l.nb = cols / 32;
  l.np = (l.nb + 1) / 2;
  l.scale_offset = l.np * 64;
  l.corr_offset = l.scale_offset + l.np * 8;
  l.tok_bytes = RoundUp(l.corr_offset + l.np * 8, 64);
  return l;
}

// BF16 with vdpbf16ps: the columns as bf16, dword p of a token holding the
// pair (2p, 2p+1), interleaved by token tile so that a tile's products read
// one stream: the tokens [t0, t0 + nt) of a tile (t0 a multiple of
// kFloatTokTile, nt = min(kFloatTokTile, n_tokens - t0)) occupy
// Bf16TokBytes(cols) * nt bytes from t0 * Bf16TokBytes(cols), pair p of
// token t at byte (p * nt + t - t0) * 4. One token alone is the natural
// order. (Twelve per-token streams of 4 KiB at 2,048 columns overflowed L1:
// a 2,048-column prefill ran at 80% of the bf16 peak against 94% at 576.)
int64_t Bf16TokBytes(int64_t cols) { return RoundUp(RoundUp(cols, 2) * 2, 64); }

// The bf16 activation tile of token `t` among n_tokens: its first token
// and its width (the FloatTile that reads it has T == nt).
struct TokenTile {
  int64_t t0, nt;
};
TokenTile TokenTileOf(int64_t t, int64_t n_tokens) {
  const int64_t t0 = t / kFloatTokTile * kFloatTokTile;
  return {t0, std::min<int64_t>(kFloatTokTile, n_tokens - t0)};
}

template <bool kBf16Dot>
bool NeedsPrepare(DType type) {
  return IsQuantized(type) || (kBf16Dot && type == DType::kBF16);
}

template <bool kBf16Dot>
int64_t PreparedBytes(DType type, int64_t cols, int64_t n_tokens) {
  if (IsQuantized(type)) return MakeQuantLayout(cols).tok_bytes * n_tokens;
  if (kBf16Dot && type == DType::kBF16) return Bf16TokBytes(cols) * n_tokens;
  return 0;
}

void PrepareQuant(DType type, const float* x, int64_t x_stride, int64_t cols,
                  int64_t t_begin, int64_t t_end, uint8_t* xq) {
  const QuantLayout l = MakeQuantLayout(cols);
  for (int64_t t = t_begin; t < t_end; ++t) {
    uint8_t* base = xq + t * l.tok_bytes;
    auto* d = reinterpret_cast<float*>(base + l.scale_offset);
    auto* ci = reinterpret_cast<int32_t*>(base + l.corr_offset);
    auto* cf = reinterpret_cast<float*>(base + l.corr_offset);
    for (int64_t b = 0; b < l.nb; ++b) {
      const avx512::ActBlock blk = avx512::QuantizeBlock(x + t * x_stride + b * 32);
      _mm_store_si128(reinterpret_cast<__m128i*>(base + b * 32), blk.lo);
      _mm_store_si128(reinterpret_cast<__m128i*>(base + b * 32 + 16), blk.hi);
      d[b] = blk.d;
      if (type == DType::kQ4_0) ci[b] = -8 * blk.sum;
      if (type == DType::kQ8_0) ci[b] = -128 * blk.sum;
      if (type == DType::kQ4_1) cf[b] = blk.d * static_cast<float>(blk.sum);
    }
    if (l.nb % 2 != 0) {  // the padding block: zero values, scale, correction
      std::memset(base + l.nb * 32, 0, 32);
      d[l.nb] = 0.0f;
      ci[l.nb] = 0;
    }
  }
}

__attribute__((target("avx512bf16"))) void PrepareBf16(
    const float* x, int64_t x_stride, int64_t cols, int64_t n_tokens,
    int64_t t_begin, int64_t t_end, uint8_t* xq) {
  const int64_t tok_bytes = Bf16TokBytes(cols);
  const int64_t pairs = RoundUp(cols, 2) / 2;
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                         12, 13, 14, 15);
  for (int64_t t = t_begin; t < t_end; ++t) {
    const float* xt = x + t * x_stride;
    const TokenTile tile = TokenTileOf(t, n_tokens);
    auto* out = reinterpret_cast<int32_t*>(xq + tile.t0 * tok_bytes) +
                (t - tile.t0);
    const __m512i index = _mm512_mullo_epi32(
        iota, _mm512_set1_epi32(static_cast<int>(tile.nt)));
    for (int64_t p = 0; p < pairs; p += 16) {
      const int64_t i = 2 * p;
      const __m512 lo = _mm512_maskz_loadu_ps(
          avx512::TailMask(std::max<int64_t>(0, cols - i)), xt + i);
      const __m512 hi = _mm512_maskz_loadu_ps(
          avx512::TailMask(std::max<int64_t>(0, cols - i - 16)), xt + i + 16);
      const __m512i v = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
      if (tile.nt == 1) {
        _mm512_mask_storeu_epi32(out + p, avx512::TailMask(pairs - p), v);
      } else {
        _mm512_mask_i32scatter_epi32(out + p * tile.nt,
                                     avx512::TailMask(pairs - p), index, v, 4);
      }
    }
  }
}

template <bool kBf16Dot>
void Prepare(DType type, const float* x, int64_t x_stride, int64_t cols,
             int64_t n_tokens, int64_t t_begin, int64_t t_end, uint8_t* xq) {
  if (IsQuantized(type)) {
    PrepareQuant(type, x, x_stride, cols, t_begin, t_end, xq);
  } else if (kBf16Dot && type == DType::kBF16) {
    PrepareBf16(x, x_stride, cols, n_tokens, t_begin, t_end, xq);
  }
}

// ------------------------------------------------------ quantized tiles

inline __m512i Bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Stores the 16 rows of v (those below `rows_left`) at y.
inline void Store16(float* y, int64_t rows_left, __m512 v) {
  _mm512_mask_storeu_ps(y, avx512::TailMask(rows_left), v);
}

// R groups of 16 rows (gb bytes apart) x T tokens.
template <DType kType, int R, int T>
void QuantTile(const MatMulArgs& a, const QuantLayout& l, const uint8_t* group,
               int64_t gb, int64_t r0, int64_t t0) {
  constexpr int64_t kQb = kQsBytes<kType>;
  constexpr int64_t kPb = kPairBytes<kType>;
  const uint8_t* xq[T];
  const float* dx[T];
  const void* cx[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    xq[t] = a.xq + (t0 + t) * l.tok_bytes;
    dx[t] = reinterpret_cast<const float*>(xq[t] + l.scale_offset);
    cx[t] = xq[t] + l.corr_offset;
  }
  __m512 acc[R][T];
#pragma GCC unroll 8
  for (int g = 0; g < R; ++g) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[g][t] = _mm512_setzero_ps();
  }
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  for (int64_t p = 0; p < l.np; ++p) {
    const uint8_t* pg = group + p * kPb;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int64_t b = 2 * p + h;
      __m512i dot[R][T];
#pragma GCC unroll 8
      for (int g = 0; g < R; ++g) {
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          dot[g][t] = kType == DType::kQ4_1
                          ? _mm512_setzero_si512()
                          : _mm512_set1_epi32(
                                static_cast<const int32_t*>(cx[t])[b]);
        }
      }
      // Per step: the R groups' weight vectors, then each token's
      // broadcast activations against all of them (one broadcast live at a
      // time, so the R * T accumulators keep their registers).
      if constexpr (kType == DType::kQ8_0) {
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          __m512i wv[R];
#pragma GCC unroll 4
          for (int g = 0; g < R; ++g)
            wv[g] = _mm512_load_si512(pg + g * gb + h * kQb + 64 * k);
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            const __m512i xv = Bcast4(xq[t] + b * 32 + 4 * k);
#pragma GCC unroll 4
            for (int g = 0; g < R; ++g)
              dot[g][t] = _mm512_dpbusd_epi32(dot[g][t], wv[g], xv);
          }
        }
      } else {
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          __m512i lo[R], hi[R];
#pragma GCC unroll 4
          for (int g = 0; g < R; ++g) {
            const __m512i raw =
                _mm512_load_si512(pg + g * gb + h * kQb + 64 * j);
            lo[g] = _mm512_and_si512(raw, low4);
            hi[g] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
          }
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            const __m512i xl = Bcast4(xq[t] + b * 32 + 4 * j);
            const __m512i xh = Bcast4(xq[t] + b * 32 + 16 + 4 * j);
#pragma GCC unroll 4
            for (int g = 0; g < R; ++g) {
              dot[g][t] = _mm512_dpbusd_epi32(dot[g][t], lo[g], xl);
              dot[g][t] = _mm512_dpbusd_epi32(dot[g][t], hi[g], xh);
            }
          }
        }
      }
#pragma GCC unroll 4
      for (int g = 0; g < R; ++g) {
        const uint8_t* scales = pg + g * gb + 2 * kQb;
        const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(
            reinterpret_cast<const __m256i*>(scales + 32 * h)));
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          acc[g][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[g][t]),
                                      _mm512_mul_ps(dw, _mm512_set1_ps(dx[t][b])),
                                      acc[g][t]);
        }
        if constexpr (kType == DType::kQ4_1) {
          const __m512 mw = _mm512_cvtph_ps(_mm256_load_si256(
              reinterpret_cast<const __m256i*>(scales + 64 + 32 * h)));
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            acc[g][t] = _mm512_fmadd_ps(
                mw, _mm512_set1_ps(static_cast<const float*>(cx[t])[b]),
                acc[g][t]);
          }
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < R; ++g) {
    const int64_t row = r0 + g * kGroupRows;
    if (row >= a.w->rows) break;
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      Store16(a.y + (t0 + t) * a.y_stride + row, a.w->rows - row, acc[g][t]);
    }
  }
}

// ---------------------------------------------------------- float tiles

enum class FloatMode { kF16, kBf16Widen, kBf16Dot };

// R groups of 16 rows x T tokens: per column pair, R weight vectors (widened
// once for all T tokens, or fed to vdpbf16ps as they are) against the
// tokens' broadcast activations; partials in registers, totals in L1.
// Columns [c0, c1) only (c0 a multiple of kFloatBlock): with `resume`, the
// totals start from what y holds (the earlier columns' total, stored
// exactly), so a row's sum is the same chain of block partials however its
// columns are cut.
template <FloatMode kMode, int R, int T>
__attribute__((target("avx512bf16"))) void FloatTile(
    const MatMulArgs& a, const uint8_t* group, int64_t gb, int64_t r0,
    int64_t t0, int64_t c0, int64_t c1, bool resume) {
  const int64_t cols = c1;
  const int64_t pairs = RoundUp(cols, 2) / 2;
  const float* x[T];
#pragma GCC unroll 12
  for (int t = 0; t < T; ++t) x[t] = a.x + (t0 + t) * a.x_stride;
  // The tile's interleaved bf16 activations (T is the tile's width).
  const uint32_t* xb =
      kMode == FloatMode::kBf16Dot
          ? reinterpret_cast<const uint32_t*>(a.xq +
                                              t0 * Bf16TokBytes(a.w->cols))
          : nullptr;
  alignas(64) float total[R][T][16];
  if (resume) {
#pragma GCC unroll 4
    for (int g = 0; g < R; ++g) {
      const int64_t row = r0 + g * kGroupRows;
      if (row >= a.w->rows) break;
#pragma GCC unroll 12
      for (int t = 0; t < T; ++t) {
        _mm512_store_ps(total[g][t],
                        _mm512_maskz_loadu_ps(
                            avx512::TailMask(a.w->rows - row),
                            a.y + (t0 + t) * a.y_stride + row));
      }
    }
  }
  const int64_t blocks = (cols + kFloatBlock - 1) / kFloatBlock;
  const int64_t first_block = c0 / kFloatBlock;
  const __m512i high16 = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t blk = first_block; blk < blocks; ++blk) {
    const int64_t k0 = blk * kFloatBlock;
    const int64_t k1 = std::min(cols, k0 + kFloatBlock);
    __m512 p[R][T];
#pragma GCC unroll 4
    for (int g = 0; g < R; ++g) {
#pragma GCC unroll 12
      for (int t = 0; t < T; ++t) p[g][t] = _mm512_setzero_ps();
    }
    if constexpr (kMode == FloatMode::kBf16Dot) {
      const int64_t p1 = std::min(pairs, k1 / 2 + k1 % 2);
      for (int64_t kp = k0 / 2; kp < p1; ++kp) {
        __m512i wv[R];
#pragma GCC unroll 4
        for (int g = 0; g < R; ++g)
          wv[g] = _mm512_load_si512(group + g * gb + kp * 64);
#pragma GCC unroll 12
        for (int t = 0; t < T; ++t) {
          const __m512i xv =
              _mm512_set1_epi32(static_cast<int>(xb[kp * T + t]));
#pragma GCC unroll 4
          for (int g = 0; g < R; ++g) {
            p[g][t] = _mm512_dpbf16_ps(p[g][t], (__m512bh)wv[g], (__m512bh)xv);
          }
        }
      }
    } else {
      int64_t k = k0;
      for (; k + 2 <= k1; k += 2) {
        __m512 wlo[R], whi[R];
#pragma GCC unroll 4
        for (int g = 0; g < R; ++g) {
          const uint8_t* src = group + g * gb + k * 32;
          if constexpr (kMode == FloatMode::kF16) {
            wlo[g] = _mm512_cvtph_ps(
                _mm256_load_si256(reinterpret_cast<const __m256i*>(src)));
            whi[g] = _mm512_cvtph_ps(
                _mm256_load_si256(reinterpret_cast<const __m256i*>(src + 32)));
          } else {
            const __m512i wv = _mm512_load_si512(src);
            wlo[g] = _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16));
            whi[g] = _mm512_castsi512_ps(_mm512_and_si512(wv, high16));
          }
        }
#pragma GCC unroll 12
        for (int t = 0; t < T; ++t) {
          const __m512 xl = _mm512_set1_ps(x[t][k]);
#pragma GCC unroll 4
          for (int g = 0; g < R; ++g)
            p[g][t] = _mm512_fmadd_ps(wlo[g], xl, p[g][t]);
          const __m512 xh = _mm512_set1_ps(x[t][k + 1]);
#pragma GCC unroll 4
          for (int g = 0; g < R; ++g)
            p[g][t] = _mm512_fmadd_ps(whi[g], xh, p[g][t]);
        }
      }
      if (k < k1) {  // odd column count: the last column alone
#pragma GCC unroll 4
        for (int g = 0; g < R; ++g) {
          const __m512i wv = _mm512_load_si512(group + g * gb + k * 32);
          const __m512 wlo =
              kMode == FloatMode::kF16
                  ? _mm512_cvtph_ps(_mm512_castsi512_si256(wv))
                  : _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16));
#pragma GCC unroll 12
          for (int t = 0; t < T; ++t) {
            p[g][t] = _mm512_fmadd_ps(wlo, _mm512_set1_ps(x[t][k]), p[g][t]);
          }
        }
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < R; ++g) {
#pragma GCC unroll 12
      for (int t = 0; t < T; ++t) {
        _mm512_store_ps(total[g][t],
                        blk == first_block && !resume
                            ? p[g][t]
                            : _mm512_add_ps(_mm512_load_ps(total[g][t]),
                                            p[g][t]));
      }
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < R; ++g) {
    const int64_t row = r0 + g * kGroupRows;
    if (row >= a.w->rows) break;
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) {
      Store16(a.y + (t0 + t) * a.y_stride + row, a.w->rows - row,
              _mm512_load_ps(total[g][t]));
    }
  }
}

// ------------------------------------------------------------ row loops

constexpr int kQuantTokTile = 6;

template <typename Fn, int R, int... Ts, typename Make>
constexpr auto TileTable(std::integer_sequence<int, Ts...>, Make make) {
  return std::array<Fn, sizeof...(Ts)>{make.template operator()<R, Ts + 1>()...};
}

using QuantFn = void (*)(const MatMulArgs&, const QuantLayout&, const uint8_t*,
                         int64_t, int64_t, int64_t);
using FloatFn = void (*)(const MatMulArgs&, const uint8_t*, int64_t, int64_t,
                         int64_t, int64_t, int64_t, bool);

template <DType kType>
struct QuantMaker {
  template <int R, int T>
  constexpr QuantFn operator()() const {
    return &QuantTile<kType, R, T>;
  }
};

template <FloatMode kMode>
struct FloatMaker {
  template <int R, int T>
  constexpr FloatFn operator()() const {
    return &FloatTile<kMode, R, T>;
  }
};

// Sweeps rows [row_begin, row_end) in L2-sized chunks (of groups that each
// sweep `swept_bytes`); within a chunk every
// token tile runs over every row tile: 4 groups at once for up to k4 tokens
// (several memory streams for decode), else 2, then 1 for the rest.
template <typename Fn, int kTok, int k4, typename Call>
void SweepRows(const MatMulArgs& a, int64_t gb, int64_t swept_bytes,
               int64_t row_begin, int64_t row_end,
               const std::array<Fn, k4>& t4,
               const std::array<Fn, kTok>& t2, const std::array<Fn, kTok>& t1,
               Call call) {
  const auto* packed = static_cast<const uint8_t*>(a.w->packed);
  auto at = [&](int64_t r) { return packed + r / kGroupRows * gb; };
  const int64_t chunk =
      std::max<int64_t>(4, kChunkBytes / std::max<int64_t>(1, swept_bytes)) /
      4 * 4 * kGroupRows;
  for (int64_t c0 = row_begin; c0 < row_end; c0 += chunk) {
    const int64_t c1 = std::min(row_end, c0 + chunk);
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kTok) {
      const int64_t nt = std::min<int64_t>(kTok, a.n_tokens - t0);
      int64_t r0 = c0;
      if (nt <= k4) {
        for (; r0 + 4 * kGroupRows <= c1; r0 += 4 * kGroupRows)
          call(t4[nt - 1], at(r0), r0, t0);
      }
      for (; r0 + 2 * kGroupRows <= c1; r0 += 2 * kGroupRows)
        call(t2[nt - 1], at(r0), r0, t0);
      for (; r0 < c1; r0 += kGroupRows)
        call(t1[nt - 1], at(r0), r0, t0);
    }
  }
}

template <DType kType>
void QuantRows(const MatMulArgs& a, int64_t row_begin, int64_t row_end) {
  static constexpr auto k4 = TileTable<QuantFn, 4>(
      std::make_integer_sequence<int, 3>(), QuantMaker<kType>());
  static constexpr auto k2 = TileTable<QuantFn, 2>(
      std::make_integer_sequence<int, kQuantTokTile>(), QuantMaker<kType>());
  static constexpr auto k1 = TileTable<QuantFn, 1>(
      std::make_integer_sequence<int, kQuantTokTile>(), QuantMaker<kType>());
  const QuantLayout l = MakeQuantLayout(a.w->cols);
  const int64_t gb = GroupBytes(kType, a.w->cols);
  SweepRows<QuantFn, kQuantTokTile, 3>(
      a, gb, gb, row_begin, row_end, k4, k2, k1,
      [&](QuantFn fn, const uint8_t* g, int64_t r0, int64_t t0) {
        fn(a, l, g, gb, r0, t0);
      });
}

template <FloatMode kMode>
void FloatRows(const MatMulArgs& a, int64_t row_begin, int64_t row_end) {
  constexpr int kTok = kFloatTokTile;
  static constexpr auto k4 = TileTable<FloatFn, 4>(
      std::make_integer_sequence<int, 3>(), FloatMaker<kMode>());
  static constexpr auto k2 = TileTable<FloatFn, 2>(
      std::make_integer_sequence<int, kTok>(), FloatMaker<kMode>());
  static constexpr auto k1 = TileTable<FloatFn, 1>(
      std::make_integer_sequence<int, kTok>(), FloatMaker<kMode>());
  const int64_t gb = GroupBytes(a.w->type, a.w->cols);
  const int64_t cols = a.w->cols;
  // Several token tiles re-read each chunk of rows: cut wide matrices into
  // column spans so that a chunk of 4 groups stays within L2 (at 8,192
  // columns one bf16 group is 256 KiB, and 4 of them streamed from L3 kept
  // a 2-thread prefill at 1.6x one thread).
  const int64_t span = a.n_tokens > kTok ? kFloatColumnSpan : cols;
  for (int64_t c0 = 0; c0 < cols; c0 += span) {
    const int64_t c1 = std::min(cols, c0 + span);
    const int64_t span_gb = c1 == cols && c0 == 0 ? gb : (c1 - c0) * 32;
    SweepRows<FloatFn, kTok, 3>(
        a, gb, span_gb, row_begin, row_end, k4, k2, k1,
        [&](FloatFn fn, const uint8_t* g, int64_t r0, int64_t t0) {
          fn(a, g, gb, r0, t0, c0, c1, c0 > 0);
        });
  }
}

template <bool kBf16Dot>
void Rows(const MatMulArgs& a, int64_t row_begin, int64_t row_end) {
  switch (a.w->type) {
    case DType::kQ4_0:
      return QuantRows<DType::kQ4_0>(a, row_begin, row_end);
    case DType::kQ4_1:
      return QuantRows<DType::kQ4_1>(a, row_begin, row_end);
    case DType::kQ8_0:
      return QuantRows<DType::kQ8_0>(a, row_begin, row_end);
    case DType::kF16:
      return FloatRows<FloatMode::kF16>(a, row_begin, row_end);
    case DType::kBF16:
      return FloatRows<kBf16Dot ? FloatMode::kBf16Dot : FloatMode::kBf16Widen>(
          a, row_begin, row_end);
    default:
      return;  // not packed (PackedBytes is 0)
  }
}

}  // namespace

bool CpuHasAvx512Bf16() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
  return eax & (1u << 5);
}

const PackedKernels& Avx512PackedKernels(bool bf16_dot) {
  static const PackedKernels dot{PackFormat::kAvx512Rows16,
                                 kGroupRows,
                                 &PackedBytes,
                                 &Pack,
                                 &PreparedBytes<true>,
                                 &Prepare<true>,
                                 &Rows<true>,
                                 &NeedsPrepare<true>,
                                 /*bf16_activations=*/true,
                                 kTilesPerSplit512};
  static const PackedKernels widen{PackFormat::kAvx512Rows16,
                                   kGroupRows,
                                   &PackedBytes,
                                   &Pack,
                                   &PreparedBytes<false>,
                                   &Prepare<false>,
                                   &Rows<false>,
                                   &NeedsPrepare<false>,
                                   /*bf16_activations=*/false,
                                   kTilesPerSplit512};
  return bf16_dot ? dot : widen;
}

}  // namespace pdserve::kernels_internal
