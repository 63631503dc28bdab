// One batched forward pass of a decoder-only transformer (Llama, Qwen3 dense)
// over token spans of several sequences, on the CPU, with a paged KV cache.
#ifndef PDSERVE_ENGINE_MODEL_FORWARD_H_
#define PDSERVE_ENGINE_MODEL_FORWARD_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/kv/kv_storage.h"
#include "engine/model/attention.h"
#include "engine/model/gated_deltanet.h"
#include "engine/model/moe.h"
#include "engine/model/packed_weights.h"
#include "engine/model_weights.h"
#include "kernels/thread_pool.h"

namespace pdserve {

// The new tokens of one sequence in a step. Views only; the caller keeps the
// memory alive for the duration of Run.
struct SequenceSpan {
  // Tokens to process now (at least one), at positions start_pos, ...
  absl::Span<const int32_t> tokens;
  // Tokens of this sequence already in the KV cache (its next position).
  int64_t start_pos = 0;
  // KV page ids (into the KvStorage) of this sequence: page i holds positions
  // [i * page_size, (i + 1) * page_size). Must cover start_pos + size().
  absl::Span<const int32_t> page_table;
  // Added to every position for RoPE only (mRoPE text delta); the KV slot of
  // a token is always its plain position.
  int64_t rope_delta = 0;
  // true: a logits row for every token; false: only for the last token.
  bool all_logits = false;
  // Hybrid models: this sequence's linear-attention state,
  // config.linear_state_floats() floats (KvPool::LinearState), read and
  // updated in place; zeroed by Run when start_pos == 0.
  float* linear_state = nullptr;
  // Hybrid models: this sequence's linear-attention slot in the KvPool
  // (KvPool::StateSlot), -1 for dense models. Backends that keep the state
  // off the host (engine/backend) use it instead of linear_state; ForwardPass
  // ignores it.
  int32_t state_slot = -1;
  // Multimodal prompts (a vision-language model's image tokens): the (t, h,
  // w) RoPE positions of each token, 3 * size() values [token][3] (the
  // slice of ComputeMropePositions, image_tokens.h, for these tokens);
  // empty = start_pos + i + rope_delta on all three axes.
  absl::Span<const int64_t> mrope_positions;
  // The vision encoder's outputs for this span's image placeholder tokens
  // (config.vision.image_token_id), in order: image_rows rows of
  // hidden_size floats, written over those tokens' embeddings by the
  // cumulative-sum index (InjectImageEmbeddings). Null: placeholders embed
  // like any other token.
  const float* image_embeds = nullptr;
  int64_t image_rows = 0;

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  int64_t logit_rows() const { return all_logits ? size() : 1; }
};

// Work accounting of Run calls (plain counters; Run adds to them).
struct ForwardStats {
  int64_t steps = 0;             // Run calls
  int64_t tokens = 0;            // tokens processed
  int64_t logit_rows = 0;        // rows of logits produced
  int64_t weight_bytes_read = 0; // weight matrices/vectors read (once a step)
  int64_t kv_bytes_read = 0;     // keys + values attended over (once per
                                 // sequence and layer)
  int64_t kv_bytes_written = 0;  // keys + values of the new tokens
  int64_t flops = 0;             // multiply-adds counted as 2
  // MoE models: distinct (layer, expert) pairs selected in the step, and
  // expert weight matrices multiplied (3 per selected expert when each
  // expert's weights are read once per step).
  int64_t experts_selected = 0;
  int64_t expert_matrices_read = 0;

  ForwardStats& operator+=(const ForwardStats& o);
};

// Runs the model over a batch of SequenceSpans in ONE pass: every weight
// matrix is applied to all tokens of all spans in a single MatMul (weights are
// read once per step); attention runs per sequence over its own KV pages
// (causal within the new span) with grouped-query heads; the LM head runs only
// for the rows whose logits are wanted.
//
// Batch invariance: a sequence's logits are bitwise identical whether it runs
// alone or with other sequences, and whether its tokens arrive in one span or
// in several chunks (per-row kernels, per-query attention in a fixed order).
//
// All scratch memory is allocated at construction for `max_batch_tokens`
// tokens; Run does not allocate on the heap. The matrices are repacked at
// construction for the active kernels (PackModelForCpu, packed_weights.h),
// using `pool`. `weights`, `kv` and `pool` must outlive the object. Thread-compatible: one Run at a time (it uses every
// thread of `pool`).
class ForwardPass {
 public:
  // INVALID_ARGUMENT when the KV storage does not match the model (layers,
  // kv_dim) or max_batch_tokens < 1; the message names the numbers.
  // A sequence may hold at most max_positions() = min(storage tokens,
  // model max_context) positions (the attention scratch is sized for it).
  static absl::StatusOr<std::unique_ptr<ForwardPass>> Create(
      const ModelWeights& weights, KvStorage& kv, ThreadPool& pool,
      int64_t max_batch_tokens);
  // Same, for callers that checked the shapes (CHECK-style abort on misuse).
  ForwardPass(const ModelWeights& weights, KvStorage& kv, ThreadPool& pool,
              int64_t max_batch_tokens);
  ~ForwardPass();
  ForwardPass(const ForwardPass&) = delete;
  ForwardPass& operator=(const ForwardPass&) = delete;

  // Rows of logits Run writes for `batch` (sum of SequenceSpan::logit_rows).
  static int64_t LogitRows(absl::Span<const SequenceSpan> batch);

  // Processes `batch`: writes each token's key/value into its KV page and,
  // into `logits`, LogitRows(batch) rows of vocab_size floats, in span order
  // (all rows of a span with all_logits, else its last row). Adds the step's
  // work to *stats when non-null. INVALID_ARGUMENT (nothing is written) for:
  // an empty span, a token id outside [0, vocab), start_pos < 0, a page table
  // too short for start_pos + tokens or naming a page outside the storage,
  // more than max_batch_tokens tokens in total, a logits buffer too small,
  // mrope_positions not 3 per token, image_rows not the span's placeholder
  // count.
  absl::Status Run(absl::Span<const SequenceSpan> batch,
                   absl::Span<float> logits, ForwardStats* stats = nullptr);

  const ModelConfig& config() const { return weights_.config; }
  // The model with its matrices packed for the active kernels (the vision
  // tower's too); valid as long as this object.
  const ModelWeights& packed_weights() const { return weights_; }
  int64_t max_batch_tokens() const { return max_tokens_; }
  int64_t max_positions() const { return max_positions_; }

 private:
  struct AttnItem {  // one unit of attention work
    int32_t span;      // index into the batch
    int32_t kv_head;   // kv heads [kv_head, kv_head + kv_heads)
    int32_t kv_heads;
    int32_t row_begin;  // rows (tokens) of the span, relative
    int32_t row_end;
    int32_t segment;         // split over the context: the key segment;
                             // -1: the whole block
    int64_t partial_offset;  // split: its records in partials_
  };
  struct SplitSpan {  // a (span, kv head) whose items wrote partial records
    int32_t span;
    int32_t kv_head;
    int64_t partial_offset;
  };

  absl::Status Validate(absl::Span<const SequenceSpan> batch,
                        absl::Span<float> logits) const;
  void Embed(absl::Span<const SequenceSpan> batch);
  void PrepareRope(absl::Span<const SequenceSpan> batch);
  void Layer(int64_t layer, absl::Span<const SequenceSpan> batch);
  // Q/K norms and RoPE, then each row's key and value stored in the KV
  // cache (converted to its dtype) in the same pass.
  void QkNormRopeAndStore(const LayerWeights& lw, int64_t layer,
                          absl::Span<const SequenceSpan> batch);
  void PlanAttention(absl::Span<const SequenceSpan> batch);
  AttentionBlock BlockFor(int64_t layer, const SequenceSpan& span,
                          int64_t span_index, int32_t kv_head,
                          int32_t kv_heads, int32_t row_begin,
                          int32_t row_end);
  void Attention(int64_t layer, absl::Span<const SequenceSpan> batch);
  void LmHead(absl::Span<const SequenceSpan> batch, float* logits);
  void RmsNormRows(const float* x, const float* w, int64_t rows, float* out);
  void DenseFfn(const LayerWeights& lw, int64_t rows);
  void AttentionLayer(int64_t layer, const LayerWeights& lw,
                      absl::Span<const SequenceSpan> batch);
  void Account(absl::Span<const SequenceSpan> batch, int64_t logit_rows,
               ForwardStats* stats) const;

  // The views Run reads: `weights` with packed copies for the kernels.
  std::unique_ptr<const PackedModel> packed_;
  const ModelWeights& weights_;
  KvStorage& kv_;
  ThreadPool& pool_;
  const int64_t max_tokens_;
  int64_t max_positions_;  // longest sequence Run accepts
  int64_t layer_bytes_ = 0;    // all layers' weights + output norm
  int64_t layer_macs_ = 0;     // multiply-adds per token in all layers
  int64_t lm_head_bytes_ = 0;
  int64_t rows_ = 0;           // tokens in the current batch

  // Scratch, [max_tokens][width] each.
  std::vector<float> x_;      // residual stream [hidden]
  std::vector<float> xn_;     // normed input [hidden]
  std::vector<float> q_;      // [q_dim]
  std::vector<float> k_;      // [kv_dim]
  std::vector<float> v_;      // [kv_dim]
  std::vector<float> attn_;   // attention output [q_dim]
  std::vector<float> gate_;   // [intermediate]
  std::vector<float> up_;     // [intermediate]
  std::vector<float> proj_;   // wo / w_down output [hidden]
  std::vector<float> rope_cos_;  // [max_tokens][rope_dims / 2]
  std::vector<float> rope_sin_;
  std::vector<float> inv_freq_;  // [rope_dims / 2]
  // Per batch row: span index and row within the span.
  std::vector<int32_t> row_span_;
  std::vector<int32_t> row_in_span_;
  std::vector<int32_t> logit_src_;       // batch row of each logits row
  std::vector<int64_t> span_first_row_;  // [max_tokens] first batch row
  std::vector<AttnItem> items_;          // capacity fixed at construction
  int64_t num_items_ = 0;
  // Split over the context (16/8-bit KV): partial records
  // [split rows][heads][max_segments_][m, l, o] and the spans to combine.
  bool split_ok_ = false;
  int64_t max_segments_ = 0;
  std::vector<float> partials_;
  std::vector<SplitSpan> splits_;
  int64_t num_splits_ = 0;
  // Attention scratch (scores, transposed keys), per thread.
  int64_t scratch_per_thread_ = 0;
  std::vector<float> scratch_;
  std::atomic<int64_t> next_item_{0};
  std::unique_ptr<MoeBlock> moe_;  // MoE models only (hook: moe.h)
  // Hybrid models (hooks: gated_deltanet.h): the linear-attention block,
  // each layer's rank among the linear layers, and for gated attention the
  // q_proj output [q | gate per head] and the gates.
  std::unique_ptr<GatedDeltaNet> gdn_;
  std::vector<int64_t> linear_index_;
  std::vector<int64_t> linear_before_;  // linear layers below each layer
  std::vector<float> qg_;
  std::vector<float> attn_gate_;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_MODEL_FORWARD_H_
