// Dispatcher, scalar reference and split-context combine of the tiled
// attention. Compiled with -ffp-contract=off, like the kernels: the scalar
// code here rounds exactly as their vector code does; and with
// -fno-tree-vectorize: GCC 12.2's loop vectorizer miscompiles the two-chain
// strided reduction of ReferenceQueryBf16 (`for (d = 0; d < n; d += 4)
// { a = (a + x[d+1]) + x[d]; c = (c + x[d+3]) + x[d+2]; }` sums wrong at
// -O2 and -O3; right at -O1 or without vectorization).
#include "engine/model/attention_tiled.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/matmul.h"

#if defined(PDSERVE_ATTN_X86)
#include <cpuid.h>
#endif

namespace pdserve {
namespace attn_internal {

float AttnExp(float x) {
  const float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float t = xc * 1.44269504088896341f + 12582912.0f;
  const float n = t - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  int32_t ti;
  std::memcpy(&ti, &t, sizeof(t));
  const int32_t e = ((ti - 0x4B400000) + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, sizeof(e));
  const float y = p * scale;
  return x < -87.0f ? 0.0f : y;
}

namespace {

bool CpuHas(const char* isa);

bool CpuHas(const char* isa) {
#if defined(PDSERVE_ATTN_X86)
  if (std::strcmp(isa, "avx512bf16") == 0) {
    return CpuHas("avx512") && __builtin_cpu_supports("avx512bf16");
  }
  if (std::strcmp(isa, "avx512") == 0) {
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }
  if (std::strcmp(isa, "avx2") == 0) {
    // F16C by CPUID (leaf 1, ECX bit 29): clang's __builtin_cpu_supports
    // has no "f16c".
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c =
        __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
    return __builtin_cpu_supports("avx2") && f16c;
  }
#endif
  return std::strcmp(isa, "generic") == 0;
}

const TiledKernels& Selected() {
  static const TiledKernels k = [] {
    const char* level = MatMulIsa();  // follows PDSERVE_ISA
#if defined(PDSERVE_ATTN_X86)
    if (std::strcmp(level, "avx512") == 0 && CpuHas("avx512bf16")) {
      return Avx512Bf16Kernels();
    }
    if (std::strcmp(level, "avx512") == 0 && CpuHas("avx512")) {
      return Avx512Kernels();
    }
    if (std::strcmp(level, "scalar") != 0 && CpuHas("avx2")) {
      return Avx2Kernels();
    }
#endif
    (void)level;
    return GenericKernels();
  }();
  return k;
}

}  // namespace

const TiledKernels* KernelsFor(const char* isa) {
  if (isa == nullptr) return &Selected();
  if (!CpuHas(isa)) return nullptr;
#if defined(PDSERVE_ATTN_X86)
  static const TiledKernels avx512bf16 = Avx512Bf16Kernels();
  static const TiledKernels avx512 = Avx512Kernels();
  static const TiledKernels avx2 = Avx2Kernels();
  if (std::strcmp(isa, "avx512bf16") == 0) return &avx512bf16;
  if (std::strcmp(isa, "avx512") == 0) return &avx512;
  if (std::strcmp(isa, "avx2") == 0) return &avx2;
#endif
  static const TiledKernels generic = GenericKernels();
  return &generic;
}

}  // namespace attn_internal

namespace {

using attn_internal::AttnExp;
constexpr int64_t kTile = 16;
constexpr int64_t kBf16Block = 64;  // bf16: keys per softmax step

void InitRecord(float* rec, int64_t hd) {
  rec[0] = -std::numeric_limits<float>::infinity();
  rec[1] = 0.0f;
  std::fill(rec + 2, rec + 2 + hd, 0.0f);
}

void MergeRecord(float* run, const float* seg, int64_t hd) {
  const float m = std::max(run[0], seg[0]);
  const float a = AttnExp(run[0] - m);
  const float b = AttnExp(seg[0] - m);
  run[0] = m;
  run[1] = run[1] * a + seg[1] * b;
  for (int64_t c = 0; c < hd; ++c) run[2 + c] = run[2 + c] * a + seg[2 + c] * b;
}

void FinishRecord(const float* run, int64_t hd, float* out) {
  const float inv = 1.0f / run[1];
  for (int64_t c = 0; c < hd; ++c) out[c] = run[2 + c] * inv;
}

float PairwiseSum16(float* a) {
  for (int w = 8; w >= 1; w /= 2) {
    for (int i = 0; i < w; ++i) a[i] = a[i] + a[i + w];
  }
  return a[0];
}

uint32_t RoundBf16Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
float Bf16Float(uint32_t h) {
  const uint32_t u = h << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// The bf16 arithmetic (attention_tiled.h): q and p rounded to bf16, each
// pair step (acc + odd product) + even product.
void ReferenceQueryBf16(const AttentionBlock& b, const float* q,
                        int64_t n_keys, float* out) {
  const KvStorage& kv = *b.kv;
  const int64_t hd = b.head_dim, ps = kv.page_size();
  const int64_t base = b.kv_head * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float qb[kAttnMaxHeadDim], run[kAttnMaxHeadDim + 2], seg[kAttnMaxHeadDim + 2];
  // Small stack buffers (no thread_local: static TLS would not fit the
  // metrics server's thread stacks), one key or value pair at a time.
  float kj[kAttnMaxHeadDim], v0[kAttnMaxHeadDim], v1[kAttnMaxHeadDim];
  for (int64_t d = 0; d < hd; ++d) qb[d] = Bf16Float(RoundBf16Bits(q[d] * scale));
  InitRecord(run, hd);
  for (int64_t sg = 0; sg < AttnSegments(n_keys); ++sg) {
    const int64_t k0 = sg * kAttnSegmentKeys;
    const int64_t k1 = std::min(k0 + kAttnSegmentKeys, n_keys);
    InitRecord(seg, hd);
    for (int64_t t = k0; t < k1; t += kBf16Block) {
      const int64_t valid = std::min(kBf16Block, k1 - t);
      float s[kBf16Block], p[kBf16Block];
      for (int64_t j = 0; j < valid; ++j) {
        const int64_t pos = t + j;
        kv.ReadKey(b.page_table[pos / ps], b.layer, pos % ps, kj, base, hd);
        float a = 0.0f, c = 0.0f;
        for (int64_t d = 0; d < hd; d += 4) {
          a = (a + qb[d + 1] * kj[d + 1]) + qb[d] * kj[d];
          c = (c + qb[d + 3] * kj[d + 3]) + qb[d + 2] * kj[d + 2];
        }
        s[j] = a + c;
      }
      float tmax = s[0];
      for (int64_t j = 1; j < valid; ++j) tmax = std::max(tmax, s[j]);
      if (tmax > seg[0]) {
        const float corr = AttnExp(seg[0] - tmax);
        seg[1] = seg[1] * corr;
        for (int64_t c = 0; c < hd; ++c) seg[2 + c] = seg[2 + c] * corr;
        seg[0] = tmax;
      }
      for (int64_t j = 0; j < kBf16Block; ++j) {
        p[j] = j < valid ? Bf16Float(RoundBf16Bits(AttnExp(s[j] - seg[0])))
                         : 0.0f;
      }
      // l += pairwise sum of ((lanes 0-15 + 16-31) + (32-47 + 48-63)).
      float lanes[kTile];
      for (int64_t j = 0; j < kTile; ++j) {
        lanes[j] = (p[j] + p[j + 16]) + (p[j + 32] + p[j + 48]);
      }
      seg[1] = seg[1] + PairwiseSum16(lanes);
      for (int64_t j = 0; j < valid; j += 2) {
        const int64_t pos = t + j;
        kv.ReadValue(b.page_table[pos / ps], b.layer, pos % ps, v0, base, hd);
        if (j + 1 < valid) {
          kv.ReadValue(b.page_table[(pos + 1) / ps], b.layer, (pos + 1) % ps,
                       v1, base, hd);
        }
        for (int64_t c = 0; c < hd; ++c) {
          float o = seg[2 + c];
          if (j + 1 < valid) o = o + p[j + 1] * v1[c];
          seg[2 + c] = o + p[j] * v0[c];
        }
      }
    }
    MergeRecord(run, seg, hd);
  }
  FinishRecord(run, hd, out);
}

// One query of the reference: `n_keys` positions, into `out`.
void ReferenceQuery(const AttentionBlock& b, const float* q, int64_t n_keys,
                    float* out) {
  if (b.kv->dtype() == KvDType::kBF16) {
    ReferenceQueryBf16(b, q, n_keys, out);
    return;
  }
  const KvStorage& kv = *b.kv;
  const int64_t hd = b.head_dim, ps = kv.page_size();
  const int64_t base = b.kv_head * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Stack buffers: no heap use on the step path.
  float qs[kAttnMaxHeadDim], run[kAttnMaxHeadDim + 2], seg[kAttnMaxHeadDim + 2];
  float k[kTile * kAttnMaxHeadDim], v[kTile * kAttnMaxHeadDim];
  for (int64_t d = 0; d < hd; ++d) qs[d] = q[d] * scale;
  InitRecord(run, hd);
  for (int64_t sg = 0; sg < AttnSegments(n_keys); ++sg) {
    const int64_t k0 = sg * kAttnSegmentKeys;
    const int64_t k1 = std::min(k0 + kAttnSegmentKeys, n_keys);
    InitRecord(seg, hd);
    for (int64_t t = k0; t < k1; t += kTile) {
      const int64_t valid = std::min(kTile, k1 - t);
      float s[kTile], p[kTile];
      for (int64_t j = 0; j < valid; ++j) {
        const int64_t pos = t + j;
        kv.ReadKey(b.page_table[pos / ps], b.layer, pos % ps, &k[j * hd], base,
                   hd);
        kv.ReadValue(b.page_table[pos / ps], b.layer, pos % ps, &v[j * hd],
                     base, hd);
        float even = 0.0f, odd = 0.0f;
        for (int64_t d = 0; d < hd; d += 2) {
          even = even + qs[d] * k[j * hd + d];
          if (d + 1 < hd) odd = odd + qs[d + 1] * k[j * hd + d + 1];
        }
        s[j] = even + odd;
      }
      float tmax = s[0];
      for (int64_t j = 1; j < valid; ++j) tmax = std::max(tmax, s[j]);
      if (tmax > seg[0]) {
        const float corr = AttnExp(seg[0] - tmax);
        seg[1] = seg[1] * corr;
        for (int64_t c = 0; c < hd; ++c) seg[2 + c] = seg[2 + c] * corr;
        seg[0] = tmax;
      }
      for (int64_t j = 0; j < kTile; ++j) {
        p[j] = j < valid ? AttnExp(s[j] - seg[0]) : 0.0f;
      }
      float lanes[kTile];
      std::memcpy(lanes, p, sizeof(lanes));
      seg[1] = seg[1] + PairwiseSum16(lanes);
      for (int64_t j = 0; j < valid; ++j) {
        for (int64_t c = 0; c < hd; ++c) {
          seg[2 + c] = seg[2 + c] + p[j] * v[j * hd + c];
        }
      }
    }
    MergeRecord(run, seg, hd);
  }
  FinishRecord(run, hd, out);
}

}  // namespace

bool AttendTiledVectorized(int64_t head_dim) {
  return head_dim % kTile == 0 && head_dim <= kAttnMaxHeadDim;
}

int64_t AttendTiledScratchFloats(int64_t head_dim, int64_t group) {
  const int64_t nq = kAttnTiledRows * group;
  // q, the running and segment records, then 4 staged bf16 tiles (bf16) or
  // one f32 key and value tile (the others).
  return nq * (head_dim + 2 * AttnPartialFloats(head_dim)) +
         4 * kTile * head_dim;
}

const char* AttendTiledIsa() { return attn_internal::KernelsFor(nullptr)->name; }

namespace {

// Calls fn(block, partials) for pieces of b's kv heads: one head each
// unless the bf16 kernels take several (at most kAttnTiledRows / rows); a
// piece's partial records follow the previous piece's heads.
template <typename Fn>
void ForHeadPieces(const AttentionBlock& b, float* partials,
                   int64_t partial_stride, Fn fn) {
  const bool together = b.kv->dtype() == KvDType::kBF16 &&
                        AttendTiledVectorized(b.head_dim);
  const int64_t rows = b.row_end - b.row_begin;
  const int64_t most =
      together ? std::max<int64_t>(1, kAttnTiledRows / std::max<int64_t>(1, rows))
               : 1;
  const int64_t head_partials =
      rows * b.group * partial_stride * AttnPartialFloats(b.head_dim);
  for (int64_t h = 0; h < b.kv_heads; h += most) {
    AttentionBlock piece = b;
    piece.kv_head = b.kv_head + h;
    piece.kv_heads = std::min(most, b.kv_heads - h);
    fn(piece, partials == nullptr ? nullptr : partials + h * head_partials);
  }
}

}  // namespace

void AttendTiledReference(const AttentionBlock& b) {
  if (b.kv_heads != 1) {
    for (int64_t h = 0; h < b.kv_heads; ++h) {
      AttentionBlock one = b;
      one.kv_head = b.kv_head + h;
      one.kv_heads = 1;
      AttendTiledReference(one);
    }
    return;
  }
  for (int64_t r = b.row_begin; r < b.row_end; ++r) {
    for (int64_t g = 0; g < b.group; ++g) {
      const int64_t off = r * b.q_stride + (b.kv_head * b.group + g) * b.head_dim;
      ReferenceQuery(b, b.q + off, b.start_pos + r + 1, b.out + off);
    }
  }
}

void AttendTiled(const AttentionBlock& b, float* scratch) {
  if (!AttendTiledVectorized(b.head_dim)) {
    AttendTiledReference(b);
    return;
  }
  ForHeadPieces(b, nullptr, 0, [&](const AttentionBlock& piece, float*) {
    attn_internal::KernelsFor(nullptr)->attend(piece, 0, 0, nullptr, 0,
                                               scratch);
  });
}

void AttendTiledPartial(const AttentionBlock& b, int64_t seg_begin,
                        int64_t seg_end, float* partials,
                        int64_t partial_stride, float* scratch) {
  ForHeadPieces(b, partials, partial_stride,
                [&](const AttentionBlock& piece, float* piece_partials) {
                  attn_internal::KernelsFor(nullptr)->attend(
                      piece, seg_begin, seg_end, piece_partials,
                      partial_stride, scratch);
                });
}

void CombineAttnPartials(const AttentionBlock& b, const float* partials,
                         int64_t partial_stride) {
  const int64_t hd = b.head_dim, rec_n = AttnPartialFloats(hd);
  if (b.kv_heads != 1) {
    const int64_t head_partials =
        (b.row_end - b.row_begin) * b.group * partial_stride * rec_n;
    for (int64_t h = 0; h < b.kv_heads; ++h) {
      AttentionBlock one = b;
      one.kv_head = b.kv_head + h;
      one.kv_heads = 1;
      CombineAttnPartials(one, partials + h * head_partials, partial_stride);
    }
    return;
  }
  float run[kAttnMaxHeadDim + 2];
  for (int64_t r = b.row_begin; r < b.row_end; ++r) {
    for (int64_t g = 0; g < b.group; ++g) {
      const int64_t qi = (r - b.row_begin) * b.group + g;
      InitRecord(run, hd);
      const int64_t nseg = AttnSegments(b.start_pos + r + 1);
      for (int64_t s = 0; s < nseg; ++s) {
        MergeRecord(run, partials + (qi * partial_stride + s) * rec_n,
                    hd);
      }
      FinishRecord(run, hd,
                   b.out + r * b.q_stride + (b.kv_head * b.group + g) * hd);
    }
  }
}

}  // namespace pdserve
