// TensorSource implementations for each supported model format.
#ifndef PDSERVE_ENGINE_LOADER_TENSOR_SOURCES_H_
#define PDSERVE_ENGINE_LOADER_TENSOR_SOURCES_H_

#include <memory>

#include "engine/formats/gguf.h"
#include "engine/formats/llama2c.h"
#include "engine/formats/safetensors.h"
#include "engine/loader/weight_builder.h"

namespace pdserve {

// GGUF names: token_embd.weight, blk.N.attn_q.weight, ..., output.weight.
// GGML dims are reversed into outermost-first shapes.
// A GGUF tensor as a RawTensor (shape outermost first; data in the file's
// mapping, which the caller keeps alive).
RawTensor RawTensorFromGguf(const GgufTensorInfo& t);
// A safetensors tensor as a RawTensor (data in the model's mapping).
RawTensor RawTensorFromSafetensors(const SafetensorsTensor& t);

std::unique_ptr<TensorSource> MakeGgufSource(
    std::shared_ptr<const GgufFile> file);

// Hugging Face names: model.embed_tokens.weight,
// model.layers.N.self_attn.q_proj.weight, ..., lm_head.weight.
std::unique_ptr<TensorSource> MakeSafetensorsSource(
    std::shared_ptr<const SafetensorsModel> model);

// llama2.c checkpoints: per-layer slices of the stacked f32 arrays, named
// like "wq[3]" in errors.
std::unique_ptr<TensorSource> MakeLlama2cSource(Llama2cCheckpoint checkpoint);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_LOADER_TENSOR_SOURCES_H_
