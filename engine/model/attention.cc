// Compiled with -ffp-contract=off (see CMakeLists.txt): the vector code
// below computes bitwise the same on every SIMD level.
#include "engine/model/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/model/attention_tiled.h"
#include "kernels/ops.h"

namespace pdserve {
namespace {

constexpr int64_t kLanes = 16;  // keys per transposed block
constexpr int64_t kMaxHeadVectors = 16;  // head_dim <= 256 on the fast path

using V16 = float __attribute__((vector_size(64), aligned(4)));

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PDSERVE_CLONES \
  __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PDSERVE_CLONES
#endif

inline V16 Load(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void Store(float* p, V16 v) { std::memcpy(p, &v, sizeof(v)); }

// kt: keys transposed in blocks, [block][head_dim][16]. Writes the scaled
// scores of keys [0, n_keys) (rounded up to whole blocks) to `scores`.
PDSERVE_CLONES
void Scores(const float* q, const float* kt, int64_t head_dim, int64_t n_keys,
            float scale, float* scores) {
  const int64_t blocks = (n_keys + kLanes - 1) / kLanes;
  for (int64_t b = 0; b < blocks; ++b) {
    const float* k = kt + b * head_dim * kLanes;
    V16 acc = {};
    for (int64_t d = 0; d < head_dim; ++d) acc += q[d] * Load(k + d * kLanes);
    Store(scores + b * kLanes, acc * scale);
  }
}

// out[0, head_dim) = sum_j p[j] * V[j], j < n_keys in order.
PDSERVE_CLONES
void WeightedValues(const float* p, int64_t n_keys, const KvStorage& kv,
                    int64_t layer, const int32_t* pages, int64_t offset,
                    int64_t head_dim, float* out) {
  const int64_t ps = kv.page_size();
  const int64_t kv_dim = kv.kv_dim();
  const int64_t vecs = head_dim / kLanes;
  V16 acc[kMaxHeadVectors] = {};
  for (int64_t j = 0; j < n_keys; ++j) {
    const float* v =
        kv.values(pages[j / ps], layer) + (j % ps) * kv_dim + offset;
    const float w = p[j];
    for (int64_t c = 0; c < vecs; ++c) acc[c] += w * Load(v + c * kLanes);
  }
  for (int64_t c = 0; c < vecs; ++c) Store(out + c * kLanes, acc[c]);
}

// Keys [0, n_keys) of one head, transposed into 16-key blocks.
void TransposeKeys(const AttentionBlock& b, int64_t n_keys, float* kt) {
  const int64_t ps = b.kv->page_size();
  const int64_t kv_dim = b.kv->kv_dim();
  const int64_t hd = b.head_dim;
  for (int64_t j = 0; j < n_keys; ++j) {
    const float* k = b.kv->keys(b.page_table[j / ps], b.layer) +
                     (j % ps) * kv_dim + b.kv_head * hd;
    float* dst = kt + (j / kLanes) * hd * kLanes + j % kLanes;
    for (int64_t d = 0; d < hd; ++d) dst[d * kLanes] = k[d];
  }
}

// Any head_dim: kernels' Dot / Axpy per key.
void AttendGeneric(const AttentionBlock& b, float* scores) {
  const int64_t hd = b.head_dim;
  const int64_t kv_dim = b.kv->kv_dim();
  const int64_t ps = b.kv->page_size();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t r = b.row_begin; r < b.row_end; ++r) {
    const int64_t n_keys = b.start_pos + r + 1;
    for (int64_t g = 0; g < b.group; ++g) {
      const int64_t qh = b.kv_head * b.group + g;
      const float* q = b.q + r * b.q_stride + qh * hd;
      for (int64_t j = 0; j < n_keys; ++j) {
        const float* k = b.kv->keys(b.page_table[j / ps], b.layer) +
                         (j % ps) * kv_dim + b.kv_head * hd;
        scores[j] = Dot(q, k, hd) * scale;
      }
      Softmax(scores, n_keys);
      float* out = b.out + r * b.q_stride + qh * hd;
      std::fill(out, out + hd, 0.0f);
      for (int64_t j = 0; j < n_keys; ++j) {
        const float* v = b.kv->values(b.page_table[j / ps], b.layer) +
                         (j % ps) * kv_dim + b.kv_head * hd;
        Axpy(scores[j], v, out, hd);
      }
    }
  }
}

bool FastPath(int64_t head_dim) {
  return head_dim % kLanes == 0 && head_dim / kLanes <= kMaxHeadVectors;
}

int64_t RoundUp(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

}  // namespace

int64_t AttentionScratchFloats(int64_t max_positions, int64_t head_dim,
                               KvDType dtype, int64_t group) {
  if (dtype != KvDType::kF32) return AttendTiledScratchFloats(head_dim, group);
  const int64_t scores = RoundUp(max_positions);
  return FastPath(head_dim) ? scores + scores * head_dim : scores;
}

void AttendBlock(const AttentionBlock& b, float* scratch) {
  if (b.kv->dtype() != KvDType::kF32) {
    AttendTiled(b, scratch);
    return;
  }
  if (b.kv_heads != 1) {
    for (int64_t h = 0; h < b.kv_heads; ++h) {
      AttentionBlock one = b;
      one.kv_head = b.kv_head + h;
      one.kv_heads = 1;
      AttendBlock(one, scratch);
    }
    return;
  }
  if (!FastPath(b.head_dim)) {
    AttendGeneric(b, scratch);
    return;
  }
  const int64_t hd = b.head_dim;
  const int64_t max_keys = b.start_pos + b.row_end;
  float* scores = scratch;
  float* kt = scratch + RoundUp(max_keys);
  TransposeKeys(b, max_keys, kt);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t r = b.row_begin; r < b.row_end; ++r) {
    const int64_t n_keys = b.start_pos + r + 1;
    for (int64_t g = 0; g < b.group; ++g) {
      const int64_t qh = b.kv_head * b.group + g;
      Scores(b.q + r * b.q_stride + qh * hd, kt, hd, n_keys, scale, scores);
      Softmax(scores, n_keys);
      WeightedValues(scores, n_keys, *b.kv, b.layer, b.page_table.data(),
                     b.kv_head * hd, hd, b.out + r * b.q_stride + qh * hd);
    }
  }
}

}  // namespace pdserve
