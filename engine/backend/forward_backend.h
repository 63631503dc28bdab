// The compute-backend interface of the engine: where a step's batched forward
// pass runs (the CPU kernels, or a device plugin such as kernels/cuda).
//
// EngineCore owns the capacity accounting (KvPool: which pages and state slot
// a sequence holds) on the host in every case; a backend owns the memory that
// holds the keys/values and linear-attention state for that geometry (host
// KvStorage for the CPU, device memory for CUDA) and runs the model over it.
#ifndef PDSERVE_ENGINE_BACKEND_FORWARD_BACKEND_H_
#define PDSERVE_ENGINE_BACKEND_FORWARD_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/backend/device_spec.h"
#include "engine/image/image_preprocess.h"
#include "engine/model/forward.h"
#include "engine/model/sampler.h"  // SampledToken
#include "engine/model_weights.h"

namespace pdserve {

// Per-sequence sampling the device can do itself (no penalties): the
// SamplingParams of engine/model/sampler.h without the penalty fields. Greedy
// when temperature == 0. A device draw need not pick the host Sampler's
// token; it must be a deterministic function of (seed, step, logits) (the
// CUDA plugin draws SamplingUniform(seed, step) of engine/model/counter_rng.h,
// as the host does).
struct DeviceSamplingParams {
  float temperature = 0.0f;
  int32_t top_k = 0;   // 0 = off
  float top_p = 1.0f;  // 1 = off
  float min_p = 0.0f;  // 0 = off
  uint64_t seed = 0;   // with `step`, makes the draw reproducible
  uint64_t step = 0;   // position of the sampled token (prompt + generated)
};

// A backend instance serves one model and one KV geometry. Thread-
// compatible: one Run at a time (the engine's step thread).
class ForwardBackend {
 public:
  virtual ~ForwardBackend() = default;

  // "cpu", or e.g. "cuda:0 NVIDIA H200 (sm_90)".
  virtual std::string Describe() const = 0;
  virtual int64_t max_batch_tokens() const = 0;
  // Longest sequence Run accepts (positions).
  virtual int64_t max_positions() const = 0;

  // The contract of ForwardPass::Run (engine/model/forward.h): same
  // validation, same logits layout (host memory), same ForwardStats. For
  // hybrid models SequenceSpan::state_slot names the sequence's linear-
  // attention slot (backends that keep state off the host use it instead of
  // SequenceSpan::linear_state).
  virtual absl::Status Run(absl::Span<const SequenceSpan> batch,
                           absl::Span<float> logits, ForwardStats *stats) = 0;

  // Optional: the model's vision tower (ModelWeights::vision) over one
  // image, with VisionEncoder::Encode's contract (engine/model/
  // vision_encoder.h): OutputRows(grid) embeddings of the LM's hidden size
  // into `out` (host memory). A backend that implements it must also honour
  // SequenceSpan::image_embeds and mrope_positions in Run. UNIMPLEMENTED when
  // it cannot (the engine then refuses requests with images).
  virtual absl::Status EncodeImage(const ImagePatches &image,
                                   absl::Span<float> out) {
    return absl::UnimplementedError(
        "this backend has no vision encoder (images need --device cpu)");
  }
  // Whether EncodeImage works (the model has a vision tower and the backend
  // implements it).
  virtual bool HasVisionEncoder() const { return false; }

  // True when RunAndSample is implemented (the engine then uses it for
  // steps whose sequences need no penalties).
  virtual bool SamplesOnDevice() const { return false; }

  // Optional: run and sample on the device, one SampledToken per span (from
  // its last row), without copying logits to the host. UNIMPLEMENTED when
  // the backend cannot (the engine then calls Run for the same batch and
  // samples on the host), so UNIMPLEMENTED must come before any KV or state
  // is written. Greedy (temperature 0) must pick the host Sampler's token:
  // the highest logit, the lowest id among ties; logprob is log-softmax of
  // the raw logits at that token.
  virtual absl::Status RunAndSample(
      absl::Span<const SequenceSpan> batch,
      absl::Span<const DeviceSamplingParams> params,
      absl::Span<SampledToken> tokens, ForwardStats *stats) {
    return absl::UnimplementedError("device sampling not supported");
  }

  // Optional: the device memory's read bandwidth in bytes/s, measured now
  // (a read sweep of buffer_bytes, 0 = the backend's choice, larger than its
  // caches), the peak the engine's bandwidth utilisation is measured
  // against. UNIMPLEMENTED for backends without device memory of their own
  // (the CPU: the engine then probes host memory).
  virtual absl::StatusOr<double> MeasureReadBandwidth(int64_t buffer_bytes) {
    return absl::UnimplementedError(
        "this backend has no device memory probe");
  }
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_BACKEND_FORWARD_BACKEND_H_
