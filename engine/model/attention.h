// Causal grouped-query attention of new tokens over a paged KV cache (CPU),
// any KvDType: f32 runs the original per-query kernel below, the 16- and
// 8-bit types the tiled kernels of attention_tiled.h (reading the cache's
// own layout, no f32 copy of it). Used by ForwardPass; one call covers a block of query rows of one
// sequence and one key/value head with its group of query heads.
#ifndef PDSERVE_ENGINE_MODEL_ATTENTION_H_
#define PDSERVE_ENGINE_MODEL_ATTENTION_H_

#include <cstdint>

#include "absl/types/span.h"
#include "engine/kv/kv_storage.h"

namespace pdserve {

// Where the rows come from and go to.
struct AttentionBlock {
  const KvStorage* kv = nullptr;
  int64_t layer = 0;
  absl::Span<const int32_t> page_table;  // the sequence's pages
  int64_t start_pos = 0;   // position of the span's row 0
  int64_t row_begin = 0;   // rows [row_begin, row_end) of the span
  int64_t row_end = 0;
  int64_t kv_head = 0;
  // kv heads [kv_head, kv_head + kv_heads) in one pass (bf16 reads each key
  // block for all of them in turn: their keys and values are side by side
  // in a page); each head's results are bitwise those of a one-head block.
  int64_t kv_heads = 1;
  int64_t group = 1;       // query heads per kv head
  int64_t head_dim = 0;
  const float* q = nullptr;  // row 0 of the span: [rows][q_stride] floats
  int64_t q_stride = 0;
  float* out = nullptr;      // same layout as q
};

// Floats of per-thread scratch AttendBlock needs for sequences of up to
// `max_positions` positions with `group` query heads per kv head: f32
// scores plus transposed keys; for the other dtypes a few tiles.
int64_t AttentionScratchFloats(int64_t max_positions, int64_t head_dim,
                               KvDType dtype = KvDType::kF32,
                               int64_t group = 1);

// For each row r and query head h of the kv head's group: softmax over
// positions [0, start_pos + r] of q.k / sqrt(head_dim), times the values.
// The keys of those positions must already be in the cache. Each query's
// result depends only on its own q, position and the cache contents (fixed
// operation order, no FMA contraction), never on the block it is computed
// in or the CPU's SIMD level: batch invariant. `scratch` holds
// AttentionScratchFloats(start_pos + row_end, head_dim, dtype, group)
// floats.
void AttendBlock(const AttentionBlock& b, float* scratch);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_MODEL_ATTENTION_H_
