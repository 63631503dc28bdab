// The tiled attention kernels for one SIMD level (see attention_tiled.h for
// the arithmetic). Included once by each of attention_tiled_avx512.cc,
// attention_tiled_avx2.cc and attention_tiled_generic.cc, which define
// PDSERVE_ATTN_NS and are compiled with their own -m flags and
// -ffp-contract=off: the GCC vector code below then rounds exactly like the
// scalar reference on every level.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "engine/kv/kv_storage.h"
#include "engine/model/attention_tiled.h"
#include "engine/model/attention_tiled_lanes.h"
#include "kernels/dtype.h"

namespace pdserve::PDSERVE_ATTN_NS {
namespace {

// Where one tile of keys lives and the staged f32 copy the queries share.
struct TileSource {
  const KvStorage* kv;
  int64_t layer;
  const int32_t* pages;
  int64_t kv_head;
  int64_t head_dim;
};

// Keys [t, t + n) of the head as kt[d][16] (lanes >= n zero).
template <KvDType D>
void StageKeys(const TileSource& s, int64_t t, int64_t n, float* kt) {
  const KvStorage& kv = *s.kv;
  const int64_t ps = kv.page_size(), hd = s.head_dim, kvd = kv.kv_dim();
  const int64_t base = s.kv_head * hd;
  if (D != KvDType::kF32 && D != KvDType::kBF16 && ps % kL == 0) {
    const uint8_t* kb = kv.key_block(s.pages[t / ps], s.layer);
    const int64_t slot = t % ps;
    for (int64_t d = 0; d < hd; ++d) {
      const int64_t i = base + d;
      V16 k;
      if constexpr (D == KvDType::kF16) {
        k = LoadF16(reinterpret_cast<const uint16_t*>(kb) + i * ps + slot);
      } else {
        const auto* scales = reinterpret_cast<const uint16_t*>(kb + ps * kvd);
        k = LoadQ8(reinterpret_cast<const int8_t*>(kb) + i * ps + slot) *
            LoadF16(scales + (i / 32) * ps + slot);
      }
      StoreF(kt + d * kL, k);
    }
    return;
  }
  float row[kMaxHeadDim];
  std::fill(kt, kt + hd * kL, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t pos = t + j;
    kv.ReadKey(s.pages[pos / ps], s.layer, pos % ps, row, base, hd);
    for (int64_t d = 0; d < hd; ++d) kt[d * kL + j] = row[d];
  }
}

// Values [t, t + n) of the head as vt[j][head_dim].
template <KvDType D>
void StageValues(const TileSource& s, int64_t t, int64_t n, float* vt) {
  const KvStorage& kv = *s.kv;
  const int64_t ps = kv.page_size(), hd = s.head_dim, kvd = kv.kv_dim();
  const int64_t base = s.kv_head * hd;
  if (D != KvDType::kF32 && D != KvDType::kBF16 && ps % kL == 0) {
    const uint8_t* vb = kv.value_block(s.pages[t / ps], s.layer);
    const int64_t slot0 = t % ps;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t slot = slot0 + j;
      for (int64_t c = 0; c < hd; c += kL) {
        const int64_t i = base + c;
        V16 v;
        if constexpr (D == KvDType::kF16) {
          v = LoadF16(reinterpret_cast<const uint16_t*>(vb) + slot * kvd + i);
        } else {
          const auto* scales = reinterpret_cast<const uint16_t*>(vb + ps * kvd);
          const float sc = F16ToF32(scales[slot * (kvd / 32) + i / 32]);
          v = LoadQ8(reinterpret_cast<const int8_t*>(vb) + slot * kvd + i) *
              sc;
        }
        StoreF(vt + j * hd + c, v);
      }
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    const int64_t pos = t + j;
    kv.ReadValue(s.pages[pos / ps], s.layer, pos % ps, vt + j * hd, base, hd);
  }
}

inline void InitRecord(float* rec, int64_t hd) {
  rec[0] = -std::numeric_limits<float>::infinity();
  rec[1] = 0.0f;
  std::fill(rec + 2, rec + 2 + hd, 0.0f);
}

// Merges segment record `seg` into the running record `run`.
inline void MergeRecord(float* run, const float* seg, int64_t hd) {
  const float m = std::max(run[0], seg[0]);
  const float a = attn_internal::AttnExp(run[0] - m);
  const float b = attn_internal::AttnExp(seg[0] - m);
  run[0] = m;
  run[1] = run[1] * a + seg[1] * b;
  for (int64_t c = 0; c < hd; c += kL) {
    StoreF(run + 2 + c, LoadF(run + 2 + c) * a + LoadF(seg + 2 + c) * b);
  }
}

inline void FinishRecord(const float* run, int64_t hd, float* out) {
  const float inv = 1.0f / run[1];
  for (int64_t c = 0; c < hd; c += kL) {
    StoreF(out + c, LoadF(run + 2 + c) * inv);
  }
}

// Scores of up to 4 queries against the staged tile: (even d) + (odd d).
template <int NQ>
void Scores(const float* const* qs, const float* kt, int64_t hd, V16* out) {
  V16 even[NQ] = {}, odd[NQ] = {};
  for (int64_t d = 0; d < hd; d += 2) {
    const V16 k0 = LoadF(kt + d * kL);
    const V16 k1 = LoadF(kt + (d + 1) * kL);
    for (int q = 0; q < NQ; ++q) {
      even[q] = even[q] + qs[q][d] * k0;
      odd[q] = odd[q] + qs[q][d + 1] * k1;
    }
  }
  for (int q = 0; q < NQ; ++q) out[q] = even[q] + odd[q];
}

// One query's online-softmax step over the tile: `valid` keys.
template <int HV>
void Update(V16 s, int64_t valid, const float* vt, int64_t hd, float* rec) {
  s = MaskFrom(s, valid);
  const float tmax = HMaxV(s);
  const int64_t hv = HV > 0 ? HV : hd / kL;
  float* o = rec + 2;
  if (tmax > rec[0]) {
    const float corr = attn_internal::AttnExp(rec[0] - tmax);
    rec[1] = rec[1] * corr;
    for (int64_t c = 0; c < hv; ++c) {
      StoreF(o + c * kL, LoadF(o + c * kL) * corr);
    }
    rec[0] = tmax;
  }
  const V16 p = ExpV(s - rec[0]);
  rec[1] = rec[1] + HSum(p);
  float pa[kL];
  std::memcpy(pa, &p, sizeof(pa));
  if constexpr (HV > 0) {
    V16 acc[HV];
    for (int c = 0; c < HV; ++c) acc[c] = LoadF(o + c * kL);
    for (int64_t j = 0; j < valid; ++j) {
      const float w = pa[j];
      for (int c = 0; c < HV; ++c) {
        acc[c] = acc[c] + w * LoadF(vt + j * hd + c * kL);
      }
    }
    for (int c = 0; c < HV; ++c) StoreF(o + c * kL, acc[c]);
  } else {
    for (int64_t j = 0; j < valid; ++j) {
      const float w = pa[j];
      for (int64_t c = 0; c < hv; ++c) {
        StoreF(o + c * kL, LoadF(o + c * kL) + w * LoadF(vt + j * hd + c * kL));
      }
    }
  }
}

// Rows [r0, r1) (at most kAttnTiledRows) of the block over segments
// [seg_begin, seg_end); full mode when partials is null.
template <KvDType D, int HV>
void AttendRows(const AttentionBlock& b, int64_t r0, int64_t r1,
                int64_t seg_begin, int64_t seg_end, float* partials,
                int64_t partial_stride, float* scratch) {
  const int64_t hd = b.head_dim, g = b.group;
  const int64_t rec_n = AttnPartialFloats(hd);
  const int64_t nq = (r1 - r0) * g;
  float* qs = scratch;                  // [nq][hd]
  float* run = qs + nq * hd;            // [nq][rec]
  float* seg = run + nq * rec_n;        // [nq][rec]
  float* kt = seg + nq * rec_n;         // [hd][16]
  float* vt = kt + hd * kL;             // [16][hd]
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t h = 0; h < g; ++h) {
      const float* q = b.q + r * b.q_stride + (b.kv_head * g + h) * hd;
      float* dst = qs + ((r - r0) * g + h) * hd;
      for (int64_t d = 0; d < hd; ++d) dst[d] = q[d] * scale;
    }
  }
  const bool full = partials == nullptr;
  if (full) {
    for (int64_t i = 0; i < nq; ++i) InitRecord(run + i * rec_n, hd);
  }
  const int64_t max_keys = b.start_pos + r1;
  const int64_t last_seg = full ? AttnSegments(max_keys)
                                : std::min(seg_end, AttnSegments(max_keys));
  const TileSource src{b.kv, b.layer, b.page_table.data(), b.kv_head, hd};
  for (int64_t sg = full ? 0 : seg_begin; sg < last_seg; ++sg) {
    const int64_t k0 = sg * kAttnSegmentKeys;
    const int64_t k1 = std::min(k0 + kAttnSegmentKeys, max_keys);
    // Queries reaching this segment: rows with start_pos + r + 1 > k0.
    const int64_t first_row = std::max(r0, k0 - b.start_pos);
    const int64_t q_first = (first_row - r0) * g;
    for (int64_t i = q_first; i < nq; ++i) InitRecord(seg + i * rec_n, hd);
    for (int64_t t = k0; t < k1; t += kL) {
      const int64_t n = std::min(kL, k1 - t);
      StageKeys<D>(src, t, n, kt);
      StageValues<D>(src, t, n, vt);
      // Queries whose keys reach tile t.
      const int64_t q_tile = (std::max(first_row, t - b.start_pos) - r0) * g;
      for (int64_t i = q_tile; i < nq; i += 4) {
        const int nb = static_cast<int>(std::min<int64_t>(4, nq - i));
        const float* qp[4];
        for (int k = 0; k < 4; ++k) qp[k] = qs + std::min(i + k, nq - 1) * hd;
        V16 s[4];
        if (nb == 4) {
          Scores<4>(qp, kt, hd, s);
        } else if (nb == 3) {
          Scores<3>(qp, kt, hd, s);
        } else if (nb == 2) {
          Scores<2>(qp, kt, hd, s);
        } else {
          Scores<1>(qp, kt, hd, s);
        }
        for (int k = 0; k < nb; ++k) {
          const int64_t qi = i + k;
          const int64_t r = r0 + qi / g;
          const int64_t valid = std::min(kL, b.start_pos + r + 1 - t);
          Update<HV>(s[k], valid, vt, hd, seg + qi * rec_n);
        }
      }
    }
    for (int64_t i = q_first; i < nq; ++i) {
      if (full) {
        MergeRecord(run + i * rec_n, seg + i * rec_n, hd);
      } else {
        std::memcpy(partials + (i + (r0 - b.row_begin) * g) * partial_stride *
                                   rec_n + sg * rec_n,
                    seg + i * rec_n, rec_n * sizeof(float));
      }
    }
  }
  if (full) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t h = 0; h < g; ++h) {
        FinishRecord(run + ((r - r0) * g + h) * rec_n, hd,
                     b.out + r * b.q_stride + (b.kv_head * g + h) * hd);
      }
    }
  }
}

template <KvDType D, int HV>
void AttendAllRows(const AttentionBlock& b, int64_t seg_begin, int64_t seg_end,
                   float* partials, int64_t partial_stride, float* scratch) {
  for (int64_t r0 = b.row_begin; r0 < b.row_end; r0 += kAttnTiledRows) {
    const int64_t r1 = std::min(b.row_end, r0 + kAttnTiledRows);
    AttendRows<D, HV>(b, r0, r1, seg_begin, seg_end, partials, partial_stride,
                      scratch);
  }
}

template <KvDType D>
void AttendDType(const AttentionBlock& b, int64_t seg_begin, int64_t seg_end,
                 float* partials, int64_t partial_stride, float* scratch) {
  switch (b.head_dim) {
    case 64:
      return AttendAllRows<D, 4>(b, seg_begin, seg_end, partials,
                                 partial_stride, scratch);
    case 128:
      return AttendAllRows<D, 8>(b, seg_begin, seg_end, partials,
                                 partial_stride, scratch);
    default:
      return AttendAllRows<D, 0>(b, seg_begin, seg_end, partials,
                                 partial_stride, scratch);
  }
}

// ---------------------------------------------------------------------------
// bf16: dot products on bf16 pairs (vdpbf16ps where the CPU has AVX512-BF16,
// the same operations in f32 elsewhere: each product of two bf16 is exact,
// and the instruction adds the odd pair element's product first, then the
// even one's, each rounded).

// Where a tile's bf16 pairs are: key pair row p at k + p * k_stride, value
// pair t (slots 2t, 2t + 1) at v + t * v_stride (uint16 units).
struct Bf16Tile {
  const uint16_t* k;
  int64_t k_stride;
  const uint16_t* v;
  int64_t v_stride;
};

// Pointers into the page when the tile lies in one (page_size % 16 == 0);
// else the tile's pairs copied (bits as they are) into `stage`.
Bf16Tile Bf16TileAt(const TileSource& s, int64_t t, int64_t n,
                    uint16_t* stage) {
  const KvStorage& kv = *s.kv;
  const int64_t ps = kv.page_size(), hd = s.head_dim;
  const int64_t base = s.kv_head * hd;
  if (ps % kL == 0) {
    const auto* kb = reinterpret_cast<const uint16_t*>(
        kv.key_block(s.pages[t / ps], s.layer));
    const auto* vb = reinterpret_cast<const uint16_t*>(
        kv.value_block(s.pages[t / ps], s.layer));
    const int64_t slot = t % ps;
    return {kb + kv.Bf16KeyIndex(slot, base), ps * 2,
            vb + kv.Bf16ValueIndex(slot, base), hd * 2};
  }
  uint16_t* ks = stage;                 // [hd / 2][16][2]
  uint16_t* vs = stage + hd * kL;       // [8][hd][2]
  std::fill(stage, stage + 2 * hd * kL, uint16_t{0});
  for (int64_t j = 0; j < n; ++j) {
    const int64_t pos = t + j, slot = pos % ps;
    const auto* kb = reinterpret_cast<const uint16_t*>(
        kv.key_block(s.pages[pos / ps], s.layer));
    const auto* vb = reinterpret_cast<const uint16_t*>(
        kv.value_block(s.pages[pos / ps], s.layer));
    for (int64_t d = 0; d < hd; ++d) {
      ks[((d / 2) * kL + j) * 2 + d % 2] = kb[kv.Bf16KeyIndex(slot, base + d)];
      vs[((j / 2) * hd + d) * 2 + j % 2] =
          vb[kv.Bf16ValueIndex(slot, base + d)];
    }
  }
  return {ks, kL * 2, vs, hd * 2};
}

// Asks for the keys and values of positions [t, t + n) of the head (n <= 64)
// ahead of their use, when tiles lie in pages (page_size % 16 == 0): a tile
// is one run of 32 * head_dim bytes of keys and one of values, in a page of
// its own for 16-token pages, which the hardware prefetchers do not follow
// from one page to the next.
inline void PrefetchBf16Block(const TileSource& s, int64_t t, int64_t n) {
  const KvStorage& kv = *s.kv;
  const int64_t ps = kv.page_size(), hd = s.head_dim;
  if (ps % kL != 0) return;
  const int64_t base = s.kv_head * hd;
  const int64_t value_bytes = hd * kL * 2;  // the tile's values, one run
  for (int64_t j = 0; j < n; j += kL) {
    const int64_t pos = t + j, slot = pos % ps;
    const auto* kb = reinterpret_cast<const char*>(
        reinterpret_cast<const uint16_t*>(
            kv.key_block(s.pages[pos / ps], s.layer)) +
        kv.Bf16KeyIndex(slot, base));
    const auto* vb = reinterpret_cast<const char*>(
        reinterpret_cast<const uint16_t*>(
            kv.value_block(s.pages[pos / ps], s.layer)) +
        kv.Bf16ValueIndex(slot, base));
    const int64_t k_stride = ps * 4;  // bytes from one key pair row to next
    for (int64_t p = 0; p < hd / 2; ++p) {
      __builtin_prefetch(kb + p * k_stride, 0, 1);
    }
    for (int64_t b = 0; b < value_bytes; b += 64) {
      __builtin_prefetch(vb + b, 0, 1);
    }
  }
}

// Scores of up to 4 queries (q pairs [hd / 2]): pair rows p = 0, 2, 4, ...
// into A, 1, 3, ... into B; score = A + B.
template <int NQ>
void ScoresBf16(const uint32_t* const* qp, const Bf16Tile& tile, int64_t hd,
                V16* out) {
  V16 a[NQ] = {}, b[NQ] = {};
  for (int64_t p = 0; p < hd / 2; p += 2) {
    const uint16_t* k0 = tile.k + p * tile.k_stride;
    const uint16_t* k1 = tile.k + (p + 1) * tile.k_stride;
    for (int q = 0; q < NQ; ++q) {
      a[q] = DotPairs(a[q], k0, qp[q][p]);
      b[q] = DotPairs(b[q], k1, qp[q][p + 1]);
    }
  }
  for (int q = 0; q < NQ; ++q) out[q] = a[q] + b[q];
}

constexpr int64_t kBlock = 64;  // bf16: keys per softmax step (4 tiles)
constexpr int64_t kPrefetchKeys = 2 * kBlock;

// One query's online-softmax step over a block of up to 64 keys (scores in
// 4 lane groups s[0..3], `valid` keys): updates m, l and rescales o; writes
// the bf16 weights as pairs w[0 .. (valid + 1) / 2).
template <int HV>
void SoftmaxBlockBf16(V16* s, int64_t valid, int64_t hd, float* rec,
                      uint32_t* w) {
  const int64_t ntile = (valid + kL - 1) / kL;
  V16 m = Splat(-std::numeric_limits<float>::infinity());
  for (int64_t t = 0; t < ntile; ++t) {
    s[t] = MaskFrom(s[t], valid - t * kL);
    m = MaxV(m, s[t]);
  }
  const float tmax = HMaxV(m);
  const int64_t hv = HV > 0 ? HV : hd / kL;
  float* o = rec + 2;
  if (tmax > rec[0]) {
    const float corr = attn_internal::AttnExp(rec[0] - tmax);
    rec[1] = rec[1] * corr;
    for (int64_t c = 0; c < hv; ++c) {
      StoreF(o + c * kL, LoadF(o + c * kL) * corr);
    }
    rec[0] = tmax;
  }
  // The weights rounded to bf16 (RNE), written in key order: as uint32
  // pairs, w[u] = bf16(p[2u]) | bf16(p[2u + 1]) << 16 (masked keys weigh 0).
  V16 pr[4] = {};
  auto* w16 = reinterpret_cast<uint16_t*>(w);
  for (int64_t t = 0; t < ntile; ++t) {
    const V16 p = ExpV(s[t] - rec[0]);
    U32x16 u;
    std::memcpy(&u, &p, sizeof(u));
    const U32x16 pb = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const U32x16 pbf = pb << 16;
    std::memcpy(&pr[t], &pbf, sizeof(pbf));
    const U16x16 h = __builtin_convertvector(pb, U16x16);
    std::memcpy(w16 + t * kL, &h, sizeof(h));
  }
  rec[1] = rec[1] + HSum((pr[0] + pr[1]) + (pr[2] + pr[3]));
}

// o += p v for NQ queries at once (each over its own np[q] pairs), sharing
// the value loads: for each pair u ascending, o_q = dot(o_q, v_u, w_q[u]).
template <int NQ, int HV>
void PvBf16(float* const* o, const uint32_t* const* w, const int64_t* np,
            const Bf16Tile* tiles, int64_t max_pairs) {
  V16 acc[NQ][HV];
  int64_t common = max_pairs;
  for (int q = 0; q < NQ; ++q) {
    common = std::min(common, np[q]);
    for (int c = 0; c < HV; ++c) acc[q][c] = LoadF(o[q] + c * kL);
  }
  // Pairs every query has: each value vector loaded once for all of them.
  for (int64_t u = 0; u < common; ++u) {
    const Bf16Tile& tile = tiles[u / (kL / 2)];
    const uint16_t* v = tile.v + (u % (kL / 2)) * tile.v_stride;
    U32x16 vv[HV];
    for (int c = 0; c < HV; ++c) vv[c] = LoadPairs(v + c * 32);
    for (int q = 0; q < NQ; ++q) {
      const uint32_t wq = w[q][u];
      for (int c = 0; c < HV; ++c) acc[q][c] = DotPairs(acc[q][c], vv[c], wq);
    }
  }
  for (int64_t u = common; u < max_pairs; ++u) {
    const Bf16Tile& tile = tiles[u / (kL / 2)];
    const uint16_t* v = tile.v + (u % (kL / 2)) * tile.v_stride;
    for (int q = 0; q < NQ; ++q) {
      if (u >= np[q]) continue;
      for (int c = 0; c < HV; ++c) {
        acc[q][c] = DotPairs(acc[q][c], v + c * 32, w[q][u]);
      }
    }
  }
  for (int q = 0; q < NQ; ++q) {
    for (int c = 0; c < HV; ++c) StoreF(o[q] + c * kL, acc[q][c]);
  }
}

// Any head size (hv vectors), one query.
void PvBf16Any(float* o, const uint32_t* w, int64_t np, const Bf16Tile* tiles,
               int64_t hv) {
  for (int64_t u = 0; u < np; ++u) {
    const Bf16Tile& tile = tiles[u / (kL / 2)];
    const uint16_t* v = tile.v + (u % (kL / 2)) * tile.v_stride;
    for (int64_t c = 0; c < hv; ++c) {
      StoreF(o + c * kL, DotPairs(LoadF(o + c * kL), v + c * 32, w[u]));
    }
  }
}

// One kv head's queries [q_tile, nq) (rows from r0, `g` per row) over the
// keys [t, t + n) (n <= 64) of one block: scores, the softmax step and P·V
// into the segment records `seg` ([nq][rec]).
template <int HV>
void HeadBlockBf16(const AttentionBlock& b, const TileSource& src, int64_t r0,
                   int64_t t, int64_t n, int64_t q_tile, int64_t nq,
                   const uint32_t* qs, float* seg, uint16_t* stage) {
  const int64_t hd = b.head_dim, g = b.group;
  const int64_t rec_n = AttnPartialFloats(hd);
  constexpr int kNq = HV == 8 ? 2 : 4;  // queries whose PV runs together
  const int64_t ntile = (n + kL - 1) / kL;
  Bf16Tile tiles[4];
  for (int64_t i = 0; i < ntile; ++i) {
    tiles[i] = Bf16TileAt(src, t + i * kL, std::min(kL, n - i * kL),
                          stage + i * 2 * hd * kL);
  }
  // The block's values into L1 while its scores are computed: P·V loads
  // them right after, and waited on L2 for them (decode, 135M at depth
  // 512: the value loads held ~55% of this function's samples).
  for (int64_t i = 0; i < ntile; ++i) {
    const auto* v = reinterpret_cast<const char*>(tiles[i].v);
    const int64_t bytes = kL / 2 * tiles[i].v_stride * 2;
    for (int64_t off = 0; off < bytes; off += 64) {
      __builtin_prefetch(v + off, 0, 3);
    }
  }
  for (int64_t i = q_tile; i < nq; i += kNq) {
    const int nb = static_cast<int>(std::min<int64_t>(kNq, nq - i));
    const uint32_t* qp[4];
    for (int k = 0; k < 4; ++k) qp[k] = qs + std::min(i + k, nq - 1) * hd;
    V16 s[4][4];  // [tile][query]
    for (int64_t tl = 0; tl < ntile; ++tl) {
      if (nb == 4) {
        ScoresBf16<4>(qp, tiles[tl], hd, s[tl]);
      } else if (nb == 3) {
        ScoresBf16<3>(qp, tiles[tl], hd, s[tl]);
      } else if (nb == 2) {
        ScoresBf16<2>(qp, tiles[tl], hd, s[tl]);
      } else {
        ScoresBf16<1>(qp, tiles[tl], hd, s[tl]);
      }
    }
    uint32_t w[4][kBlock / 2];
    int64_t np[4] = {0, 0, 0, 0};
    float* o[4];
    const uint32_t* wp[4];
    int64_t max_pairs = 0;
    for (int k = 0; k < nb; ++k) {
      const int64_t qi = i + k;
      const int64_t r = r0 + qi / g;
      const int64_t valid = std::min(kBlock, b.start_pos + r + 1 - t);
      V16 sq[4] = {s[0][k], s[1][k], s[2][k], s[3][k]};
      float* rec = seg + qi * rec_n;
      SoftmaxBlockBf16<HV>(sq, valid, hd, rec, w[k]);
      np[k] = (valid + 1) / 2;
      max_pairs = std::max(max_pairs, np[k]);
      o[k] = rec + 2;
      wp[k] = w[k];
    }
    if constexpr (HV > 0) {
      if (nb == kNq) {
        PvBf16<kNq, HV>(o, wp, np, tiles, max_pairs);
      } else if (kNq == 4 && nb == 3) {  // a group of 3 (decode, GQA)
        PvBf16<3, HV>(o, wp, np, tiles, max_pairs);
      } else if (kNq == 4 && nb == 2) {
        PvBf16<2, HV>(o, wp, np, tiles, max_pairs);
      } else {
        for (int k = 0; k < nb; ++k) {
          PvBf16<1, HV>(o + k, wp + k, np + k, tiles, np[k]);
        }
      }
    } else {
      for (int k = 0; k < nb; ++k) {
        PvBf16Any(o[k], wp[k], np[k], tiles, hd / kL);
      }
    }
  }
}

// Rows [r0, r1) of the kv heads [b.kv_head, b.kv_head + b.kv_heads) with
// (r1 - r0) * kv_heads <= kAttnTiledRows. Each key block is taken for every
// head in turn (their keys and values lie side by side in a page: one
// stream instead of one per head); each head's queries see exactly the
// operations of a one-head pass.
template <int HV>
void AttendRowsBf16(const AttentionBlock& b, int64_t r0, int64_t r1,
                    int64_t seg_begin, int64_t seg_end, float* partials,
                    int64_t partial_stride, float* scratch) {
  const int64_t hd = b.head_dim, g = b.group, nh = b.kv_heads;
  const int64_t rec_n = AttnPartialFloats(hd);
  const int64_t nq = (r1 - r0) * g;  // per head
  const int64_t nqa = nq * nh;
  auto* qs = reinterpret_cast<uint32_t*>(scratch);  // [nqa][hd / 2] pairs
  float* run = scratch + nqa * hd;                  // [nqa][rec]
  float* seg = run + nqa * rec_n;                   // [nqa][rec]
  auto* stage = reinterpret_cast<uint16_t*>(seg + nqa * rec_n);  // 4 tiles
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t hh = 0; hh < nh; ++hh) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t h = 0; h < g; ++h) {
        const float* q =
            b.q + r * b.q_stride + ((b.kv_head + hh) * g + h) * hd;
        uint32_t* dst = qs + (hh * nq + (r - r0) * g + h) * hd;
        for (int64_t p = 0; p < hd / 2; ++p) {
          dst[p] = (RoundBf16Bits(q[2 * p + 1] * scale) << 16) |
                   RoundBf16Bits(q[2 * p] * scale);
        }
      }
    }
  }
  const bool full = partials == nullptr;
  if (full) {
    for (int64_t i = 0; i < nqa; ++i) InitRecord(run + i * rec_n, hd);
  }
  const int64_t max_keys = b.start_pos + r1;
  const int64_t last_seg = full ? AttnSegments(max_keys)
                                : std::min(seg_end, AttnSegments(max_keys));
  // A head's records in `partials`: the block's rows times its group.
  const int64_t head_partials =
      (b.row_end - b.row_begin) * g * partial_stride * rec_n;
  auto source = [&](int64_t hh) {
    return TileSource{b.kv, b.layer, b.page_table.data(), b.kv_head + hh,
                      hd};
  };
  for (int64_t sg = full ? 0 : seg_begin; sg < last_seg; ++sg) {
    const int64_t k0 = sg * kAttnSegmentKeys;
    const int64_t k1 = std::min(k0 + kAttnSegmentKeys, max_keys);
    const int64_t first_row = std::max(r0, k0 - b.start_pos);
    const int64_t q_first = (first_row - r0) * g;
    for (int64_t hh = 0; hh < nh; ++hh) {
      for (int64_t i = q_first; i < nq; ++i) {
        InitRecord(seg + (hh * nq + i) * rec_n, hd);
      }
    }
    for (int64_t t = k0; t < k1; t += kBlock) {
      const int64_t n = std::min(kBlock, k1 - t);
      // Two blocks ahead, into the outer caches (prefetcht2): measured
      // best for decode at 4K (L1 prefetches one block ahead were no
      // faster than none).
      if (t + kPrefetchKeys < k1) {
        for (int64_t hh = 0; hh < nh; ++hh) {
          PrefetchBf16Block(source(hh), t + kPrefetchKeys,
                            std::min(kBlock, k1 - t - kPrefetchKeys));
        }
      }
      const int64_t q_tile = (std::max(first_row, t - b.start_pos) - r0) * g;
      for (int64_t hh = 0; hh < nh; ++hh) {
        HeadBlockBf16<HV>(b, source(hh), r0, t, n, q_tile, nq,
                          qs + hh * nq * hd, seg + hh * nq * rec_n, stage);
      }
    }
    for (int64_t hh = 0; hh < nh; ++hh) {
      for (int64_t i = q_first; i < nq; ++i) {
        const float* rec = seg + (hh * nq + i) * rec_n;
        if (full) {
          MergeRecord(run + (hh * nq + i) * rec_n, rec, hd);
        } else {
          std::memcpy(partials + hh * head_partials +
                          (i + (r0 - b.row_begin) * g) * partial_stride *
                              rec_n +
                          sg * rec_n,
                      rec, rec_n * sizeof(float));
        }
      }
    }
  }
  if (full) {
    for (int64_t hh = 0; hh < nh; ++hh) {
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t h = 0; h < g; ++h) {
          FinishRecord(run + (hh * nq + (r - r0) * g + h) * rec_n, hd,
                       b.out + r * b.q_stride + ((b.kv_head + hh) * g + h) * hd);
        }
      }
    }
  }
}

template <int HV>
void AttendAllRowsBf16(const AttentionBlock& b, int64_t seg_begin,
                       int64_t seg_end, float* partials,
                       int64_t partial_stride, float* scratch) {
  const int64_t step = std::max<int64_t>(1, kAttnTiledRows / b.kv_heads);
  for (int64_t r0 = b.row_begin; r0 < b.row_end; r0 += step) {
    const int64_t r1 = std::min(b.row_end, r0 + step);
    AttendRowsBf16<HV>(b, r0, r1, seg_begin, seg_end, partials,
                       partial_stride, scratch);
  }
}

void AttendBf16(const AttentionBlock& b, int64_t seg_begin, int64_t seg_end,
                float* partials, int64_t partial_stride, float* scratch) {
  switch (b.head_dim) {
    case 64:
      return AttendAllRowsBf16<4>(b, seg_begin, seg_end, partials,
                                  partial_stride, scratch);
    case 128:
      return AttendAllRowsBf16<8>(b, seg_begin, seg_end, partials,
                                  partial_stride, scratch);
    default:
      return AttendAllRowsBf16<0>(b, seg_begin, seg_end, partials,
                                  partial_stride, scratch);
  }
}

void Attend(const AttentionBlock& b, int64_t seg_begin, int64_t seg_end,
            float* partials, int64_t partial_stride, float* scratch) {
  switch (b.kv->dtype()) {
    case KvDType::kF32:
      return AttendDType<KvDType::kF32>(b, seg_begin, seg_end, partials,
                                        partial_stride, scratch);
    case KvDType::kF16:
      return AttendDType<KvDType::kF16>(b, seg_begin, seg_end, partials,
                                        partial_stride, scratch);
    case KvDType::kBF16:
      return AttendBf16(b, seg_begin, seg_end, partials, partial_stride,
                        scratch);
    case KvDType::kQ8_0:
      return AttendDType<KvDType::kQ8_0>(b, seg_begin, seg_end, partials,
                                         partial_stride, scratch);
  }
}

}  // namespace
}  // namespace pdserve::PDSERVE_ATTN_NS
