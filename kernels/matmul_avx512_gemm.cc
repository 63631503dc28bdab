// AVX-512 GEMM for float weights (F32, F16, BF16) with many tokens.
//
// The mat-vec kernel (FloatTile in matmul_avx512.cc) computes every output
// as: 16 f32 lane sums s_j = fma chain over k = j, j + 16, j + 32, ... (in
// order, values past cols read as 0), then ReduceAdd16(s). This kernel
// computes exactly the same operations in the same order, so its results are
// bitwise identical to the mat-vec kernel's (batch invariance), but with the
// outputs in vector lanes:
//   * a panel of 32 weight rows is converted to f32 once and packed "class
//     major": for each class j (k mod 16), for each m (k div 16), the 32 rows'
//     W[o][16m + j] as two zmm; rows past the range are zero;
//   * 12 tokens at a time are packed the same way (x[t][16m + j], class j
//     contiguous), once per chunk of panels (up to 1 MiB of packed weights);
//   * a register tile of 32 rows x 12 tokens (24 zmm accumulators) runs the
//     chain of one class j over m, broadcasting the packed activations;
//   * the 16 class tiles are combined in the order ReduceAdd16 uses: classes
//     are visited in bit-reversed order (0, 8, 4, 12, ...) and summed like a
//     binary counter (s0 + s8, then + (s4 + s12), ...), so only four partial
//     tiles are ever stored.
// Per k step: 2 weight loads and 12 broadcasts feed 24 FMAs; the F16/BF16
// conversion is paid once per weight per call instead of once per token tile.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "kernels/matmul_avx512_internal.h"
#include "kernels/matmul_internal.h"

namespace pdserve::kernels_internal::avx512 {
namespace {

constexpr int kPanelRows = 32;  // two zmm of rows
constexpr int kGemmTokTile = 12;
// Packed weights per chunk of panels (L2-resident while the token tiles
// sweep over them).
constexpr int64_t kChunkBytes = 1 << 20;

// In-register 16 x 16 transpose: on return r[j] lane i = (old) r[i] lane j.
inline void Transpose16(__m512* r) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // u[4g + q], 128-bit block b: rows 4g..4g+3 at column 4b + q.
  for (int g = 0; g < 4; ++g) {
    u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
    u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
  }
  for (int q = 0; q < 4; ++q) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x88);
    const __m512 v1 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xdd);
    const __m512 w0 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x88);
    const __m512 w1 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xdd);
    r[q] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    r[8 + q] = _mm512_shuffle_f32x4(v0, w0, 0xdd);
    r[4 + q] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    r[12 + q] = _mm512_shuffle_f32x4(v1, w1, 0xdd);
  }
}

// Packs rows [r0, r0 + nr) (nr <= 32) into wp[(j * M + m) * 32 + row].
template <DType kType>
void PackPanel(const WeightView& w, int64_t r0, int64_t nr, int64_t M,
               float* wp) {
  for (int h = 0; h < 2; ++h) {
    const int64_t rows = std::clamp<int64_t>(nr - 16 * h, 0, 16);
    if (rows == 0) {
      for (int64_t jm = 0; jm < 16 * M; ++jm) {
        _mm512_store_ps(wp + jm * kPanelRows + 16 * h, _mm512_setzero_ps());
      }
      continue;
    }
    for (int64_t m = 0; m < M; ++m) {
      const __mmask16 mask = TailMask(w.cols - 16 * m);
      __m512 v[16];
      for (int i = 0; i < 16; ++i) {
        v[i] = i < rows
                   ? LoadFloatRow16<kType>(w.row(r0 + 16 * h + i), 16 * m, mask)
                   : _mm512_setzero_ps();
      }
      Transpose16(v);
      for (int j = 0; j < 16; ++j) {
        _mm512_store_ps(wp + (j * M + m) * kPanelRows + 16 * h, v[j]);
      }
    }
  }
}

// Packs tokens [t0, t0 + nt) (nt <= kGemmTokTile) of x class major:
// xp[(j * M + m) * 16 + t] = x[t0 + t][16m + j], 0 past cols and for
// t >= nt (one aligned 64-byte line per (j, m); lanes past the tile unused).
void PackTokens(const MatMulArgs& a, int64_t cols, int64_t M, int64_t t0,
                int64_t nt, float* xp) {
  // 16 row pointers (the transpose's width; rows past nt repeat the last
  // token and are never loaded).
  const float* xt[16];
  for (int t = 0; t < 16; ++t)
    xt[t] = a.x + (t0 + std::min<int64_t>(t, nt - 1)) * a.x_stride;
  for (int64_t m = 0; m < M; ++m) {
    const __mmask16 mask = TailMask(cols - 16 * m);
    __m512 v[16];
    for (int t = 0; t < 16; ++t) {
      v[t] = t < nt ? _mm512_maskz_loadu_ps(mask, xt[t] + 16 * m)
                    : _mm512_setzero_ps();
    }
    Transpose16(v);
    for (int j = 0; j < 16; ++j) {
      _mm512_store_ps(xp + (j * M + m) * 16, v[j]);
    }
  }
}

// The 32 x kGemmTokTile accumulators of a register tile.
struct Tile {
  __m512 acc[2][kGemmTokTile];
};

// Runs class j's fma chain (from zero) into s: wj and xj point at the
// class's packed weights and activations.
__attribute__((always_inline)) inline void ClassChain(Tile& s, const float* wj,
                                                      const float* xj,
                                                      int64_t M) {
  constexpr int T = kGemmTokTile;
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    s.acc[0][t] = _mm512_setzero_ps();
    s.acc[1][t] = _mm512_setzero_ps();
  }
  for (int64_t m = 0; m < M; ++m) {
    const __m512 w0 = _mm512_load_ps(wj + m * kPanelRows);
    const __m512 w1 = _mm512_load_ps(wj + m * kPanelRows + 16);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const __m512 b = _mm512_set1_ps(xj[m * 16 + t]);
      s.acc[0][t] = _mm512_fmadd_ps(w0, b, s.acc[0][t]);
      s.acc[1][t] = _mm512_fmadd_ps(w1, b, s.acc[1][t]);
    }
  }
}

// y rows [o0, o0 + nr) (nr <= 32) for tokens [t0, t0 + nt) from a packed
// panel and packed tokens (the tile's other tokens are computed on zeros and
// dropped).
__attribute__((noinline)) void PanelTile(const float* wp, const float* xp,
                                         int64_t M, const MatMulArgs& a,
                                         int64_t o0, int64_t nr, int64_t t0,
                                         int64_t nt) {
  constexpr int T = kGemmTokTile;
  alignas(64) float partial[4][2][T][16];
  Tile s;
  for (int n = 0; n < 16; ++n) {
    // Bit-reversed class order: 0, 8, 4, 12, 2, 10, 6, 14, 1, 9, ...
    const int j =
        ((n & 1) << 3) | ((n & 2) << 1) | ((n & 4) >> 1) | ((n & 8) >> 3);
    ClassChain(s, wp + j * M * kPanelRows, xp + j * M * 16, M);
    // Binary-counter combination (ReduceAdd16's tree).
    int level = 0;
    for (; level < 4 && (n >> level & 1); ++level) {
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        s.acc[0][t] =
            _mm512_add_ps(s.acc[0][t], _mm512_load_ps(partial[level][0][t]));
        s.acc[1][t] =
            _mm512_add_ps(s.acc[1][t], _mm512_load_ps(partial[level][1][t]));
      }
    }
    if (level < 4) {
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        _mm512_store_ps(partial[level][0][t], s.acc[0][t]);
        _mm512_store_ps(partial[level][1][t], s.acc[1][t]);
      }
    }
  }
  const __mmask16 m0 = TailMask(nr),
                  m1 = TailMask(std::max<int64_t>(0, nr - 16));
  for (int t = 0; t < nt; ++t) {
    float* y = a.y + (t0 + t) * a.y_stride + o0;
    _mm512_mask_storeu_ps(y, m0, s.acc[0][t]);
    if (m1 != 0) _mm512_mask_storeu_ps(y + 16, m1, s.acc[1][t]);
  }
}

// Per-thread buffer of packed weights and tokens (grows once, then reused).
// Its first allocation already holds a full chunk of weight panels plus the
// packed tokens of matrices up to 4,096 columns, so matrices of different
// widths (e.g. a layer's w_down after its w_up) do not make it grow again
// later: which pool thread runs which rows varies from call to call, and a
// growth after warm-up would be a heap allocation in a steady-state step.
float* PackBuffer(int64_t floats) {
  constexpr int64_t kMinFloats = kChunkBytes / 4 + 16 * 4096;
  thread_local AlignedScratch buf;
  return reinterpret_cast<float*>(
      buf.Get(floats * sizeof(float), kMinFloats * sizeof(float)));
}

template <DType kType>
void GemmTyped(const MatMulArgs& a, int64_t row_begin, int64_t row_end,
               int64_t n_tokens) {
  const WeightView& w = *a.w;
  const int64_t M = (w.cols + 15) / 16;
  const int64_t panel_floats = 16 * M * kPanelRows;
  const int64_t panels_per_chunk = std::max<int64_t>(
      1, kChunkBytes / std::max<int64_t>(1, panel_floats * 4));
  const int64_t n_panels = (row_end - row_begin + kPanelRows - 1) / kPanelRows;
  // Sized by cols only (not by the row range or n_tokens), so the buffer
  // stops growing once the widest matrix has been seen on this thread.
  const int64_t wp_floats = panels_per_chunk * panel_floats;
  float* wp = PackBuffer(wp_floats + 16 * M * 16);
  float* xp = wp + wp_floats;
  for (int64_t p0 = 0; p0 < n_panels; p0 += panels_per_chunk) {
    const int64_t np = std::min(panels_per_chunk, n_panels - p0);
    for (int64_t p = 0; p < np; ++p) {
      const int64_t o0 = row_begin + (p0 + p) * kPanelRows;
      PackPanel<kType>(w, o0, std::min<int64_t>(kPanelRows, row_end - o0), M,
                       wp + p * panel_floats);
    }
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kGemmTokTile) {
      const int64_t nt = std::min<int64_t>(kGemmTokTile, n_tokens - t0);
      PackTokens(a, w.cols, M, t0, nt, xp);
      for (int64_t p = 0; p < np; ++p) {
        const int64_t o0 = row_begin + (p0 + p) * kPanelRows;
        PanelTile(wp + p * panel_floats, xp, M, a, o0,
                  std::min<int64_t>(kPanelRows, row_end - o0), t0, nt);
      }
    }
  }
}

}  // namespace

void ReserveGemmBuffer(int64_t cols) {
  const int64_t M = (std::max<int64_t>(cols, 1) + 15) / 16;
  const int64_t panel_floats = 16 * M * kPanelRows;
  const int64_t panels_per_chunk = std::max<int64_t>(
      1, kChunkBytes / std::max<int64_t>(1, panel_floats * 4));
  PackBuffer(panels_per_chunk * panel_floats + 16 * M * 16);
}

int64_t FloatGemmTokens(int64_t n_tokens) {
  return n_tokens < kGemmMinTokens ? 0 : n_tokens;
}

void FloatGemmRows(const MatMulArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t n = FloatGemmTokens(a.n_tokens);
  if (n == 0) return;  // (cols == 0: M = 0, every output is +0)
  VisitDType<DType::kF32, DType::kF16, DType::kBF16>(a.w->type, [&](auto t) {
    GemmTyped<decltype(t)::value>(a, row_begin, row_end, n);
  });
}

}  // namespace pdserve::kernels_internal::avx512
