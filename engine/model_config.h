// Architecture hyper-parameters of a decoder-only transformer.
#ifndef PDSERVE_ENGINE_MODEL_CONFIG_H_
#define PDSERVE_ENGINE_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/image/image_preprocess.h"
#include "kernels/ops.h"

namespace pdserve {

// The vision tower of a vision-language model (Qwen3.5 / Qwen3-VL; Hugging
// Face vision_config names, or a llama.cpp mmproj GGUF's clip.vision.*):
// a Conv3d patch embedding (as a matmul over temporal x spatial patches),
// learned positions on a square grid resampled to each image, 2D rotary
// attention blocks (LayerNorm, bias everywhere), and a merger of
// merge x merge patches into one language-model token. Plain value type;
// present() is false for text-only models. Dimensions are element counts.
struct VisionConfig {
  int64_t depth = 0;              // transformer blocks; 0 = no vision tower
  int64_t hidden_size = 0;        // width of the tower
  int64_t num_heads = 0;
  int64_t intermediate_size = 0;  // block MLP width
  int64_t out_hidden_size = 0;    // merger output (the LM's hidden_size)
  int64_t in_channels = 3;
  int64_t num_position_embeddings = 0;  // learned grid, side * side
  float rope_theta = 10000.0f;
  float layer_norm_eps = 1e-6f;
  // Block MLP activation: true = tanh-approximated GELU
  // (gelu_pytorch_tanh), false = exact GELU. The merger's is exact.
  bool gelu_tanh = true;
  // Patch sizes and the processor's resize limits and normalisation.
  ImagePreprocessConfig preprocess;
  // Token ids of the placeholders (-1 when unknown).
  int32_t image_token_id = -1;
  int32_t vision_start_token_id = -1;
  int32_t vision_end_token_id = -1;

  bool present() const { return depth > 0; }
  int64_t head_dim() const { return num_heads > 0 ? hidden_size / num_heads : 0; }
  int64_t merge_size() const { return preprocess.merge_size; }
  int64_t patch_dim() const {
    return in_channels * preprocess.temporal_patch_size *
           preprocess.patch_size * preprocess.patch_size;
  }
  // Side of the learned position grid.
  int64_t grid_side() const {
    int64_t s = 0;
    while ((s + 1) * (s + 1) <= num_position_embeddings) ++s;
    return s;
  }
};

enum class Architecture {
  kLlama,  // Llama 1/2/3, SmolLM2, llama2.c checkpoints
  kQwen3,  // Qwen3 dense: per-head RMSNorm on q and k
  kQwen3Moe,  // Qwen3 MoE: Qwen3 attention, top-k routed SwiGLU experts
  kQwen35,    // Qwen3.5 text: Gated DeltaNet layers + gated full attention
  kQwen3Next,  // Qwen3-Next: the same hybrid, fused in-projections, MoE with
               // a sigmoid-gated shared expert
};

// Plain value type; filled by the model loaders, read by the forward pass,
// the KV pool and the front end. Dimensions are element counts.
struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  std::string name;            // e.g. "SmolLM2-135M-Instruct"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;     // model width ("dim", "n_embd")
  int64_t intermediate_size = 0;  // MLP hidden width
  int64_t num_layers = 0;
  int64_t num_heads = 0;       // query heads
  int64_t num_kv_heads = 0;    // key/value heads (grouped-query attention)
  int64_t head_dim = 0;        // may differ from hidden_size / num_heads (Qwen3)
  int64_t rope_dims = 0;       // rotated dims per head (== head_dim unless partial)
  float rope_theta = 10000.0f;
  RopeStyle rope_style = RopeStyle::kNeox;
  float rms_norm_eps = 1e-5f;
  int64_t max_context = 2048;  // the model's trained context length
  bool tied_embeddings = false;   // LM head reuses the token embedding
  bool qk_norm = false;           // Qwen3: RMSNorm over each q/k head
  int32_t bos_token_id = -1;
  int32_t eos_token_id = -1;

  // Mixture of experts (kQwen3Moe; num_experts == 0 means dense). Layer l
  // is sparse when num_experts > 0, l is not in mlp_only_layers and
  // (l + 1) % decoder_sparse_step == 0 (HF Qwen3MoeDecoderLayer).
  int64_t num_experts = 0;
  int64_t num_experts_used = 0;       // top-k per token
  int64_t moe_intermediate_size = 0;  // each expert's SwiGLU width
  bool norm_topk_prob = true;         // renormalise the top-k probabilities
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  int64_t shared_expert_intermediate_size = 0;  // 0: no shared expert

  // Hybrid linear attention (kQwen35). linear_layers[l] is true for a Gated
  // DeltaNet layer (HF layer_types "linear_attention"); empty = none.
  std::vector<bool> linear_layers;
  int64_t linear_num_k_heads = 0;
  int64_t linear_num_v_heads = 0;
  int64_t linear_k_head_dim = 0;
  int64_t linear_v_head_dim = 0;
  int64_t linear_conv_kernel = 0;  // causal depthwise conv width
  // Full attention: q_proj yields [q | gate] per head; out *= sigmoid(gate).
  bool attn_output_gate = false;
  // mRoPE sections (pairs of rotated dims for t, h, w; Qwen3.5 interleaves
  // h and w into the t frequencies). Empty = plain RoPE.
  std::vector<int64_t> mrope_sections;
  // Vision-language models: the vision tower (present() false otherwise).
  VisionConfig vision;

  // Qwen3.5 / Qwen3-Next RMSNorms scale by (1 + w); loaders store 1 + w.
  bool ZeroCenteredNorms() const {
    return arch == Architecture::kQwen35 || arch == Architecture::kQwen3Next;
  }
  bool IsLinearLayer(int64_t layer) const {
    return layer < static_cast<int64_t>(linear_layers.size()) &&
           linear_layers[layer];
  }
  int64_t num_linear_layers() const {
    int64_t n = 0;
    for (bool b : linear_layers) n += b ? 1 : 0;
    return n;
  }
  // Layers with a KV cache (full attention); the KV storage holds only these.
  int64_t num_kv_layers() const { return num_layers - num_linear_layers(); }
  int64_t linear_key_dim() const {
    return linear_num_k_heads * linear_k_head_dim;
  }
  int64_t linear_value_dim() const {
    return linear_num_v_heads * linear_v_head_dim;
  }
  // Channels of the causal conv: q, k and v concatenated.
  int64_t linear_conv_dim() const {
    return 2 * linear_key_dim() + linear_value_dim();
  }
  // Per linear layer and sequence: conv state [conv_dim][kernel - 1] and
  // recurrent state [v_heads][k_head_dim][v_head_dim] (floats).
  int64_t conv_state_floats() const {
    return linear_conv_dim() * (linear_conv_kernel - 1);
  }
  int64_t recurrent_state_floats() const {
    return linear_num_v_heads * linear_k_head_dim * linear_v_head_dim;
  }
  int64_t linear_state_floats() const {
    return num_linear_layers() * (conv_state_floats() + recurrent_state_floats());
  }

  int64_t q_dim() const { return num_heads * head_dim; }
  bool IsMoeLayer(int64_t layer) const {
    if (num_experts <= 0) return false;
    for (int64_t l : mlp_only_layers) {
      if (l == layer) return false;
    }
    return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
  }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_MODEL_CONFIG_H_
