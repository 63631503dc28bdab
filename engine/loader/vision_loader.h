// The vision tower of a vision-language model (VisionConfig, VisionWeights):
// from a Hugging Face checkpoint (config.json's vision_config, the
// placeholder token ids, preprocessor_config.json; tensors model.visual.*)
// or from a llama.cpp mmproj GGUF (clip.vision.* keys, v.* / mm.* tensors,
// projector type qwen3vl_merger) beside a text GGUF. Config parsing is pure;
// AttachMmproj reads the file.
#ifndef PDSERVE_ENGINE_LOADER_VISION_LOADER_H_
#define PDSERVE_ENGINE_LOADER_VISION_LOADER_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/formats/gguf.h"
#include "engine/loader/weight_builder.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "nlohmann/json.hpp"

namespace pdserve {

// From config.json (`config`: its vision_config and top-level
// image_token_id / vision_start_token_id / vision_end_token_id) and
// preprocessor_config.json (`preprocessor`; null = Qwen3.5's defaults:
// patch 16, temporal 2, merge 2, 65536..16777216 pixels, mean = std = 0.5).
// A config without vision_config gives depth 0 (no tower). INVALID_ARGUMENT
// names the field for a missing or out-of-range value; UNIMPLEMENTED for an
// activation or rotary type other than gelu(_pytorch_tanh) / axial.
absl::StatusOr<VisionConfig> VisionConfigFromHfJson(
    const nlohmann::json& config, const nlohmann::json& preprocessor,
    const std::string& source);

// From an mmproj GGUF's clip.* keys. The placeholder ids are not in it:
// they come from the text model's vocabulary (VisionTokenIdsFromGguf).
absl::StatusOr<VisionConfig> VisionConfigFromMmproj(const GgufFile& mmproj);

// Sets config->*_token_id from a text GGUF's tokenizer.ggml.tokens
// ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>"); NOT_FOUND when
// the vocabulary lacks them.
absl::Status VisionTokenIdsFromGguf(const GgufFile& text_model,
                                    VisionConfig* config);

// A tensor by the file's own name (NOT_FOUND naming it when absent).
using TensorLookup =
    std::function<absl::StatusOr<RawTensor>(const std::string& name)>;

// Which names the tensors have.
enum class VisionNaming {
  kHf,      // "<prefix>patch_embed.proj.weight", "<prefix>blocks.N....",
  kMmproj,  // "v.patch_embd.weight" (+ ".weight.1"), "v.blk.N....", "mm.0"
};

// Fills w.vision from w.config.vision (present()), each tensor's shape
// checked against the config (INVALID_ARGUMENT naming the tensor and both
// shapes). `prefix` is the HF prefix ("model.visual." or "visual.").
absl::Status BuildVisionWeights(const TensorLookup& get, VisionNaming naming,
                                const std::string& prefix,
                                const std::string& source, ModelWeights& w);

// Loads the vision tower of the mmproj GGUF at `path` into `w` (a text
// model loaded from a GGUF: its token ids come from `text_model`'s
// vocabulary); the mapping is kept in w.storage. Errors name the file.
// INVALID_ARGUMENT when the projector is not Qwen3-VL's merger or its
// output width differs from the model's hidden_size.
absl::Status AttachMmproj(const std::string& path, const GgufFile* text_model,
                          ModelWeights& w);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_LOADER_VISION_LOADER_H_
