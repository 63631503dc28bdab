// Loads a model from any supported format into ModelWeights.
//
// Formats, detected from the path and the file's first bytes:
//   GGUF         a file starting with the magic "GGUF" (v2/v3);
//   safetensors  a folder, its config.json, or a .safetensors file (with a
//                config.json beside it);
//   llama2.c     a .bin file whose size matches what its header implies.
// Matrices stay in their stored type (zero-copy views of the mmap'd file);
// norm vectors end up f32. Every tensor's shape is checked against the
// config; a missing or mis-shaped tensor is an error naming it.
// Vision-language checkpoints (Qwen3_5ForConditionalGeneration) load their
// vision tower too (ModelConfig::vision, ModelWeights::vision:
// vision_loader.h) when the file holds its tensors, the language model
// alone otherwise.
#ifndef PDSERVE_ENGINE_LOADER_MODEL_LOADER_H_
#define PDSERVE_ENGINE_LOADER_MODEL_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"

namespace pdserve {

enum class ModelFormat { kGguf, kSafetensors, kLlama2c };

// "gguf", "safetensors", "llama2c".
const char* ModelFormatName(ModelFormat format);

// Detects the format of `path` (reads at most the first 28 bytes).
// InvalidArgument names the path when nothing matches; NotFound when it
// does not exist.
absl::StatusOr<ModelFormat> DetectModelFormat(const std::string& path);

// Loads config and weights. Thread-safe (no shared state).
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadModel(
    const std::string& path);

// The config alone (parses metadata / config.json / the header; maps no
// tensor data for safetensors or llama2.c). A vision_config that does not
// parse leaves config.vision absent here (LoadModel reports it).
absl::StatusOr<ModelConfig> ReadModelConfig(const std::string& path);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_LOADER_MODEL_LOADER_H_
