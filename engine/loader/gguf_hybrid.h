// Qwen3.5 ("qwen35") and Qwen3-Next ("qwen3next") GGUF files as llama.cpp's
// convert_hf_to_gguf.py writes them: the hybrid config keys, and a
// TensorSource that undoes the converter's rewrites so that the builder sees
// the Hugging Face layout (and so builds the same ModelWeights as from the
// safetensors checkpoint).
//
// What the converter does, and what the source undoes:
//   A_log                 -> ssm_a = -exp(A_log)        (source: log(-ssm_a))
//   RMSNorm weights w     -> 1 + w, except linear_attn.norm
//                            (source: NormsStoredPlusOne() == true)
//   conv1d [C][1][K]      -> ssm_conv1d [C][K]          (source: [C][1][K])
//   dt_bias               -> ssm_dt.bias
//   post_attention_layernorm -> post_attention_norm     (kFfnNorm)
//   Qwen3-Next in_proj_qkvz (grouped per key head) -> attn_qkv (all q | all
//     k | all v) + attn_gate (z); in_proj_ba kept fused as ssm_ba. Older
//     files: ssm_in = in_proj_qkvz unchanged.
//   Qwen3.5 with fewer key than value heads: the value heads of in_proj_qkv
//     (v rows), in_proj_z, in_proj_b, in_proj_a, A_log, dt_bias, the conv's
//     v channels and out_proj's columns are reordered from grouped
//     (h = g*r + j) to tiled (p = j*n_k + g); the source restores grouped.
//   --fuse-qkv: attn_q|attn_k|attn_v of full-attention layers as attn_qkv;
//   --fuse-gate-up-exps: ffn_gate_exps|ffn_up_exps as ffn_gate_up_exps.
//   shared_expert_gate [1][H] -> ffn_gate_inp_shexp ([1][H] or [H]).
#ifndef PDSERVE_ENGINE_LOADER_GGUF_HYBRID_H_
#define PDSERVE_ENGINE_LOADER_GGUF_HYBRID_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "engine/formats/gguf.h"
#include "engine/loader/weight_builder.h"
#include "engine/model_config.h"

namespace pdserve {

// Fills the hybrid fields of `c` from `<arch>.ssm.{conv_kernel, state_size,
// group_count, time_step_rank, inner_size}`, `<arch>.attention.
// recurrent_layers` (else `<arch>.full_attention_interval`, default 4) and
// `<arch>.rope.dimension_sections` (first three: the mRoPE t/h/w sections).
// c.num_layers (from block_count) loses `<arch>.nextn_predict_layers` MTP
// blocks. Errors name the file and the key.
absl::Status HybridConfigFromGguf(const GgufFile& file, const std::string& arch,
                                  ModelConfig& c);

// The source for a qwen35 / qwen3next file whose config came from
// ConfigFromGguf. Converted tensors are owned copies (RawTensor::owner);
// the rest are views of the mapping. Thread-compatible (const methods).
std::unique_ptr<TensorSource> MakeGgufHybridSource(
    std::shared_ptr<const GgufFile> file, const ModelConfig& config);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_LOADER_GGUF_HYBRID_H_
