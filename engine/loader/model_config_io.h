// ModelConfig from the metadata of each supported model format. Pure
// functions of already-parsed inputs (no IO).
#ifndef PDSERVE_ENGINE_LOADER_MODEL_CONFIG_IO_H_
#define PDSERVE_ENGINE_LOADER_MODEL_CONFIG_IO_H_

#include <string>

#include "absl/status/statusor.h"
#include "engine/formats/gguf.h"
#include "engine/formats/llama2c.h"
#include "engine/model_config.h"
#include "nlohmann/json.hpp"

namespace pdserve {

// From GGUF keys `<arch>.block_count`, `.embedding_length`, ... (arch =
// general.architecture: "llama" -> kInterleaved RoPE; "qwen3", "qwen3moe",
// "qwen35", "qwen3next" -> kNeox; the hybrid keys: gguf_hybrid.h).
// tied_embeddings is true when the file has no output.weight.
absl::StatusOr<ModelConfig> ConfigFromGguf(const GgufFile& file);

// From a Hugging Face config.json (LlamaForCausalLM, Qwen3ForCausalLM;
// RoPE kNeox). `source` names the file in errors; `name` is the model name.
absl::StatusOr<ModelConfig> ConfigFromHfJson(const nlohmann::json& config,
                                             const std::string& source,
                                             const std::string& name);

// From a llama2.c header (Llama, kInterleaved RoPE, theta 10000, eps 1e-5,
// BOS 1, EOS 2).
ModelConfig ConfigFromLlama2c(const Llama2cHeader& header,
                              const std::string& name);

// Checks every size is positive and bounded, heads divide evenly and RoPE
// dims are even and <= head_dim; InvalidArgument names field and values.
absl::Status ValidateModelConfig(const ModelConfig& config,
                                 const std::string& source);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_LOADER_MODEL_CONFIG_IO_H_
