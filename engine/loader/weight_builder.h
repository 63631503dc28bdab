// Assembles ModelWeights from any tensor source, validating every tensor's
// shape against the ModelConfig. Format-specific naming and storage live in
// the TensorSource implementations (tensor_sources.h).
#ifndef PDSERVE_ENGINE_LOADER_WEIGHT_BUILDER_H_
#define PDSERVE_ENGINE_LOADER_WEIGHT_BUILDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model_weights.h"
#include "kernels/dtype.h"

namespace pdserve {

// The weights a Llama/Qwen3 decoder has, independent of file naming.
enum class WeightKind {
  kTokenEmbd,
  kOutputNorm,
  kOutput,
  kAttnNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnOutput,
  kAttnQNorm,
  kAttnKNorm,
  kFfnNorm,
  kFfnGate,
  kFfnUp,
  kFfnDown,
  // Mixture of experts (Qwen3 MoE): the router and the stacked experts,
  // [num_experts][rows][cols] (GGUF 3-D tensors; Hugging Face per-expert
  // tensors are read through TensorSource::GetExpert).
  kFfnGateInp,
  kFfnGateExps,
  kFfnUpExps,
  kFfnDownExps,
  // Gated DeltaNet (Qwen3.5 linear_attn.*).
  kLinQkv,
  kLinZ,
  kLinB,
  kLinA,
  kLinConv,    // [conv_dim][1][kernel]
  kLinDtBias,
  kLinALog,
  kLinNorm,
  kLinOut,
  // Qwen3-Next: fused in-projections grouped per key head, shared expert.
  kLinQkvz,
  kLinBa,
  kFfnGateShexp,
  kFfnUpShexp,
  kFfnDownShexp,
  kFfnShexpGate,
};

// A tensor as stored: shape row-major, outermost first (a matrix
// [rows][cols] is {rows, cols}). `data` stays valid while the source's
// storage (Storage()) lives.
struct RawTensor {
  std::string name;  // the file's own name, for errors
  DType type = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  int64_t num_bytes = 0;
  // Set when the source made a converted copy: owns the memory `data`
  // points into (the builder keeps it in ModelWeights::storage).
  std::shared_ptr<const void> owner;
};

// Read-only access to one model file's tensors by kind.
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // The file's name of a weight (layer ignored for global kinds).
  virtual std::string Name(WeightKind kind, int64_t layer) const = 0;
  virtual bool Has(WeightKind kind, int64_t layer) const = 0;
  // NotFound names the tensor and the file; Unimplemented for a stored
  // type we cannot use.
  virtual absl::StatusOr<RawTensor> Get(WeightKind kind,
                                        int64_t layer) const = 0;
  // One expert's 2-D matrix of an expert kind (kFfn*Exps). The default
  // slices the 3-D tensor Get(kind, layer) returns; NotFound / shape errors
  // name the tensor.
  virtual absl::StatusOr<RawTensor> GetExpert(WeightKind kind, int64_t layer,
                                              int64_t expert) const;
  // True when the zero-centred RMSNorm weights (ModelConfig::
  // ZeroCenteredNorms) are stored as 1 + w already (llama.cpp's converter
  // adds the 1 for Qwen3.5 / Qwen3-Next); the builder then adds nothing.
  virtual bool NormsStoredPlusOne() const { return false; }
  // Owners of the memory RawTensor::data points into.
  virtual std::vector<std::shared_ptr<const void>> Storage() const = 0;
  // The file or folder, for error messages.
  virtual const std::string& path() const = 0;
};

// A [rows][cols] matrix view of `t`: zero-copy, or a copy when misaligned
// for its element type (kept in w.storage, as is t.owner); its bytes are
// added to w.weight_bytes. INVALID_ARGUMENT naming `source` and the tensor
// when cols is not whole blocks of t.type.
// A tensor shape as "[a, b, c]", for error messages.
std::string ShapeString(const std::vector<int64_t>& shape);

absl::StatusOr<WeightView> ViewOfTensor(const RawTensor& t, int64_t rows,
                                        int64_t cols, const std::string& source,
                                        ModelWeights& w);
// The first n values of `t` as f32: a view when stored as aligned f32, else
// converted into a buffer kept in w.storage. INVALID_ARGUMENT when n is not
// whole blocks of a quantized type.
absl::StatusOr<const float*> F32OfTensor(const RawTensor& t, int64_t n,
                                         const std::string& source,
                                         ModelWeights& w);

// Fills weights (config must already be set and validated): matrices as
// zero-copy views (copied only when misaligned for their element type),
// norm vectors as f32 (converted into owned buffers when stored otherwise),
// lm_head = token_embedding when config.tied_embeddings. Errors name the
// file, the tensor, and expected vs actual shape.
absl::Status BuildModelWeights(const TensorSource& source,
                               ModelWeights& weights);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_LOADER_WEIGHT_BUILDER_H_
