// Gated DeltaNet linear-attention layer (Qwen3.5 / Qwen3-Next) over the
// spans of one batched step, with per-sequence conv and recurrent state.
#ifndef PDSERVE_ENGINE_MODEL_GATED_DELTANET_H_
#define PDSERVE_ENGINE_MODEL_GATED_DELTANET_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/model_weights.h"
#include "kernels/thread_pool.h"

namespace pdserve {

struct SequenceSpan;

// Computes, as transformers' Qwen3_5GatedDeltaNet: qkv = W_qkv x; a causal
// depthwise conv over [conv state | qkv] then SiLU; q, k L2-normalised per
// head (eps 1e-6), q scaled by k_head_dim^-1/2, key heads shared by
// v_heads / k_heads consecutive value heads; g = -exp(A_log) *
// softplus(a + dt_bias), beta = sigmoid(b); the gated delta rule
//   S <- S * exp(g);  S <- S + k (beta (v - S^T k))^T;  o = S^T q
// per value head with S [k_head_dim][v_head_dim]; o <- RMSNorm(o) * w *
// silu(z); out = W_out o.
//
// A span of one token uses that recurrence; longer spans use the chunked
// (UT-transform) form over chunks of kChunk tokens, as
// torch_chunk_gated_delta_rule. State layout per sequence and linear layer:
// conv state [conv_dim][kernel - 1] (oldest column first), then the
// recurrent state [v_heads][k_head_dim][v_head_dim].
//
// Scratch is allocated at construction for max_rows rows; Run does not
// allocate. Thread-compatible (one Run at a time; it uses `pool`).
class GatedDeltaNet {
 public:
  static constexpr int64_t kChunk = 64;

  GatedDeltaNet(const ModelConfig& c, int64_t max_rows, int num_threads);

  // xn: [rows][hidden] normed input of all spans (span i's rows start at
  // first_row[i]); out: [rows][hidden] (overwritten). `linear_index` is the
  // layer's rank among the linear layers (its state slice). Each span's
  // linear_state must be set.
  void Run(int64_t linear_index, const LayerWeights& lw, const float* xn,
           int64_t rows, absl::Span<const SequenceSpan> batch,
           const int64_t* first_row, float* out, ThreadPool& pool);

 private:
  void Conv(int64_t linear_index, const LayerWeights& lw,
            absl::Span<const SequenceSpan> batch, const int64_t* first_row,
            ThreadPool& pool);
  void PrepareHeads(const LayerWeights& lw, int64_t rows, ThreadPool& pool);
  void Recurrent(float* state, int64_t row, int64_t head);
  void Chunked(float* state, int64_t row0, int64_t n, int64_t head,
               float* scratch);

  const ModelConfig c_;
  const int64_t max_rows_;
  std::vector<float> qkv_;   // [rows][conv_dim] projections
  std::vector<float> conv_;  // [rows][conv_dim] after conv + SiLU
  std::vector<float> z_;     // [rows][value_dim]
  std::vector<float> b_;     // [rows][v_heads] -> beta
  std::vector<float> a_;     // [rows][v_heads] -> g
  std::vector<float> core_;  // [rows][value_dim]
  int64_t scratch_per_thread_ = 0;
  std::vector<float> scratch_;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_MODEL_GATED_DELTANET_H_
