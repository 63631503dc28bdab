// Sparse mixture-of-experts SwiGLU block (Qwen3 MoE, Qwen3-Next) over the
// rows of one batched step, with tokens grouped by expert.
#ifndef PDSERVE_ENGINE_MODEL_MOE_H_
#define PDSERVE_ENGINE_MODEL_MOE_H_

#include <cstdint>
#include <vector>

#include "engine/model_weights.h"
#include "kernels/matmul_grouped.h"
#include "kernels/thread_pool.h"

namespace pdserve {

// Work of MoE blocks, summed over the calls since the last Reset.
struct MoeCounters {
  int64_t experts_selected = 0;      // distinct experts chosen, per call
  int64_t expert_matrices_read = 0;  // expert matrices multiplied, per call
  int64_t expert_bytes_read = 0;     // bytes of those matrices
  int64_t expert_macs = 0;           // multiply-adds in the experts
};

// Routes each row to its top-k experts (softmax over the router logits in
// f32, top-k by probability, lower expert id first on ties, renormalised when
// norm_topk_prob) and applies them: out[r] = sum over its experts in
// ascending expert id of p * down(silu(gate x) * up x), as transformers'
// Qwen3MoeExperts accumulates. The rows routed to one expert are gathered and
// multiplied as one group per matrix, so every selected expert's weights are
// read once per call, unselected ones never. All experts' gate and up
// products run in one parallel region (MatMulGrouped), then SwiGLU, then all
// down products in a second one; each value is bitwise what a separate MatMul
// per expert and matrix would give.
//
// With a shared expert (Qwen3-Next: lw.shared_gate set), out[r] +=
// sigmoid(shared_gate x) * down(silu(gate x) * up x) of the shared weights,
// after the routed sum, as Qwen3NextSparseMoeBlock; its products join the
// routed experts' parallel regions.
//
// Batch invariance: a row's output does not depend on the other rows (MatMul
// is row-invariant and the combination order is fixed per row).
// Scratch is allocated at construction for max_rows rows; Run does not
// allocate. Thread-compatible (one Run at a time; it uses `pool`).
class MoeBlock {
 public:
  // c.num_experts, num_experts_used and moe_intermediate_size must be > 0.
  MoeBlock(const ModelConfig& c, int64_t max_rows);

  // xn: [rows][hidden] (normed input); out: [rows][hidden] (overwritten).
  // lw.router and lw.experts must be set; rows <= max_rows.
  void Run(const LayerWeights& lw, const float* xn, int64_t rows, float* out,
           ThreadPool& pool);

  const MoeCounters& counters() const { return counters_; }
  void ResetCounters() { counters_ = MoeCounters(); }

 private:
  void Route(const LayerWeights& lw, const float* xn, int64_t rows,
             ThreadPool& pool);
  void Group(int64_t rows);
  void Gather(const float* xn, int64_t rows, ThreadPool& pool);
  // The products of the selected experts (and the shared expert when
  // `shared`), in two grouped calls with SwiGLU in between.
  void Experts(const LayerWeights& lw, const float* xn, int64_t rows,
               bool shared, ThreadPool& pool);
  void Combine(int64_t rows, bool shared, float* out, ThreadPool& pool);

  const int64_t hidden_;
  const int64_t experts_;
  const int64_t top_k_;
  const int64_t inter_;
  const bool norm_topk_;
  const int64_t max_rows_;
  std::vector<float> logits_;        // [max_rows][experts]
  std::vector<int32_t> sel_;         // [max_rows][top_k] expert, ascending
  std::vector<float> weight_;        // [max_rows][top_k]
  std::vector<int32_t> slot_;        // [max_rows][top_k] gathered row
  std::vector<int64_t> count_;       // [experts]
  std::vector<int64_t> offset_;      // [experts + 1]
  std::vector<int32_t> gather_row_;  // [max_rows * top_k] source row
  std::vector<float> xg_;            // gathered inputs [max_rows*top_k][hidden]
  std::vector<float> gate_;          // [max_rows*top_k][inter]
  std::vector<float> up_;            // [max_rows*top_k][inter]
  std::vector<float> yg_;            // expert outputs [max_rows*top_k][hidden]
  std::vector<MatMulGroup> groups_;  // [2 * experts + 3] one grouped call
  const int64_t shared_inter_;
  std::vector<float> sh_gate_;  // [max_rows][shared_inter]
  std::vector<float> sh_up_;    // [max_rows][shared_inter]
  std::vector<float> sh_out_;   // [max_rows][hidden]
  std::vector<float> sh_g_;     // [max_rows] shared gate logit
  MoeCounters counters_;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_MODEL_MOE_H_
