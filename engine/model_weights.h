// The weights of a loaded model, as views into memory the object owns.
#ifndef PDSERVE_ENGINE_MODEL_WEIGHTS_H_
#define PDSERVE_ENGINE_MODEL_WEIGHTS_H_

#include <memory>
#include <string>
#include <vector>

#include "engine/model_config.h"
#include "kernels/matmul.h"

namespace pdserve {

// One routed expert's SwiGLU: down(silu(gate x) * up x).
struct ExpertWeights {
  WeightView gate;  // [moe_intermediate_size][hidden_size]
  WeightView up;    // [moe_intermediate_size][hidden_size]
  WeightView down;  // [hidden_size][moe_intermediate_size]
};

// Weights of one decoder layer. Matrices are [out][in] (WeightView rows are
// output features). Norm vectors are f32 of their stated length.
struct LayerWeights {
  const float* attn_norm = nullptr;  // [hidden_size]
  WeightView wq;  // [q_dim][hidden_size]; [2 * q_dim] with attn_output_gate
  WeightView wk;                     // [kv_dim][hidden_size]
  WeightView wv;                     // [kv_dim][hidden_size]
  WeightView wo;                     // [hidden_size][q_dim]
  const float* q_norm = nullptr;     // [head_dim], Qwen3 only
  const float* k_norm = nullptr;     // [head_dim], Qwen3 only
  const float* ffn_norm = nullptr;   // [hidden_size]
  WeightView w_gate;                 // [intermediate_size][hidden_size]
  WeightView w_up;                   // [intermediate_size][hidden_size]
  WeightView w_down;                 // [hidden_size][intermediate_size]
  // MoE layers (ModelConfig::IsMoeLayer) instead of w_gate/w_up/w_down:
  WeightView router;                  // [num_experts][hidden_size]
  std::vector<ExpertWeights> experts;  // [num_experts]
  // Qwen3-Next shared expert (width shared_expert_intermediate_size), added
  // as sigmoid(shared_gate x) * shared(x); empty when absent.
  ExpertWeights shared;
  WeightView shared_gate;  // [1][hidden_size]
  // Gated DeltaNet layers (ModelConfig::IsLinearLayer) instead of wq..wo
  // (shapes in ModelConfig's linear_* terms):
  WeightView lin_qkv;   // [conv_dim][hidden]: q | k | v
  WeightView lin_z;     // [value_dim][hidden] output-gate input
  WeightView lin_b;     // [v_heads][hidden] -> beta = sigmoid(b)
  WeightView lin_a;     // [v_heads][hidden] -> decay input
  WeightView lin_out;   // [hidden][value_dim]
  const float* lin_conv = nullptr;     // [conv_dim][conv_kernel]
  const float* lin_dt_bias = nullptr;  // [v_heads]
  const float* lin_a_log = nullptr;    // [v_heads]
  const float* lin_norm = nullptr;     // [v_head_dim] gated RMSNorm weight
};

// One block of the vision tower. Matrices [out][in]; vectors f32.
struct VisionBlockWeights {
  const float* ln1_w = nullptr;  // [hidden] LayerNorm before attention
  const float* ln1_b = nullptr;
  WeightView qkv;                // [3 * hidden][hidden]: q | k | v
  const float* qkv_b = nullptr;  // [3 * hidden]
  WeightView proj;               // [hidden][hidden] attention output
  const float* proj_b = nullptr;
  const float* ln2_w = nullptr;  // [hidden] LayerNorm before the MLP
  const float* ln2_b = nullptr;
  WeightView fc1;                // [intermediate][hidden]
  const float* fc1_b = nullptr;
  WeightView fc2;                // [hidden][intermediate]
  const float* fc2_b = nullptr;
};

// The vision tower's weights (VisionConfig); empty blocks when absent.
struct VisionWeights {
  // The Conv3d kernel flattened to [hidden][channels * temporal * patch *
  // patch] in the processor's patch order (channel, frame, row, column).
  WeightView patch_embed;
  const float* patch_bias = nullptr;  // [hidden]
  const float* pos_embed = nullptr;   // [num_position_embeddings][hidden]
  std::vector<VisionBlockWeights> blocks;
  const float* merger_norm_w = nullptr;  // [hidden] LayerNorm per patch
  const float* merger_norm_b = nullptr;
  WeightView merger_fc1;  // [merge^2 hidden][merge^2 hidden]
  const float* merger_fc1_b = nullptr;
  WeightView merger_fc2;  // [out_hidden][merge^2 hidden]
  const float* merger_fc2_b = nullptr;
};

// A complete model: config plus weights. Owns the backing storage (file
// mappings and converted buffers, in `storage`) so the views stay valid for
// the object's lifetime. Immutable after loading; safe to share read-only
// between threads.
struct ModelWeights {
  ModelConfig config;
  std::string source_path;       // file or folder it was loaded from
  std::string source_format;     // "gguf", "safetensors", "llama2c"
  // tokenizer.json next to a safetensors model; empty otherwise (a GGUF file
  // carries its vocabulary; llama2.c needs a separate tokenizer file).
  std::string tokenizer_path;
  WeightView token_embedding;    // [vocab_size][hidden_size]
  std::vector<LayerWeights> layers;
  const float* output_norm = nullptr;  // [hidden_size]
  WeightView lm_head;            // [vocab_size][hidden_size]; == token_embedding when tied
  VisionWeights vision;          // config.vision.present() only

  // Opaque owners of the memory the views point into.
  std::vector<std::shared_ptr<const void>> storage;

  // Total bytes of all weight matrices (as stored) and norm vectors (f32),
  // the tied embedding counted once (for bandwidth metrics).
  int64_t weight_bytes = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_MODEL_WEIGHTS_H_
