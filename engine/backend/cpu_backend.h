// The CPU compute backend: ForwardPass (engine/model/forward.h) behind the
// ForwardBackend interface.
#ifndef PDSERVE_ENGINE_BACKEND_CPU_BACKEND_H_
#define PDSERVE_ENGINE_BACKEND_CPU_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/backend/forward_backend.h"
#include "engine/kv/kv_pool.h"
#include "engine/kv/kv_storage.h"
#include "engine/model/forward.h"
#include "engine/model/vision_encoder.h"
#include "engine/model_weights.h"
#include "kernels/thread_pool.h"

namespace pdserve {

// Two modes:
//  - Shared (Create): runs over the engine's host KvStorage (the KvPool's),
//    reading each span's linear_state pointer. The engine's CPU path.
//  - Owning (CreateOwning): allocates its own KvStorage and linear-state
//    slots for a KvGeometry and uses SequenceSpan::state_slot, exactly as a
//    device backend does (the plugin contract of plugin_abi.h); used by the
//    test plugin to exercise the plugin route without a GPU.
// Run is ForwardPass::Run (bitwise the same logits) and does not allocate.
// Thread-compatible: one Run at a time.
class CpuBackend : public ForwardBackend {
 public:
  // `weights`, `kv` and `threads` must outlive the backend. Errors are
  // ForwardPass::Create's.
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(
      const ModelWeights& weights, KvStorage& kv, ThreadPool& threads,
      int64_t max_batch_tokens);
  // `weights` must outlive the backend; storage, state slots and a pool of
  // `num_threads` threads (>= 1) are owned. `description` is what Describe
  // returns. INVALID_ARGUMENT for a geometry that does not fit the model.
  static absl::StatusOr<std::unique_ptr<CpuBackend>> CreateOwning(
      const ModelWeights& weights, const KvGeometry& geometry, int num_threads,
      int64_t max_batch_tokens, std::string description);
  ~CpuBackend() override;

  std::string Describe() const override { return description_; }
  int64_t max_batch_tokens() const override;
  int64_t max_positions() const override;
  // Owning mode: INVALID_ARGUMENT for a hybrid-model span whose state_slot
  // is outside [0, max_sequences).
  absl::Status Run(absl::Span<const SequenceSpan> batch,
                   absl::Span<float> logits, ForwardStats* stats) override;
  // VisionEncoder::Encode on the backend's threads; UNIMPLEMENTED for a
  // model without a vision tower.
  absl::Status EncodeImage(const ImagePatches& image,
                           absl::Span<float> out) override;
  bool HasVisionEncoder() const override { return vision_ != nullptr; }

 private:
  // The vision tower when the model has one (created with the backend).
  absl::Status InitVision(ThreadPool& threads);  // after forward_ is set

  CpuBackend() = default;

  std::string description_ = "cpu";
  // Owning mode only (declared before forward_, which refers to them).
  std::unique_ptr<ThreadPool> owned_threads_;
  std::unique_ptr<KvStorage> owned_kv_;
  std::vector<float> states_;  // [max_sequences][state floats]
  int64_t state_floats_ = 0;   // per slot; 0 for dense models
  int64_t num_slots_ = 0;
  std::vector<SequenceSpan> spans_;  // rewritten spans, [max_batch_tokens]
  std::unique_ptr<ForwardPass> forward_;
  std::unique_ptr<VisionEncoder> vision_;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_BACKEND_CPU_BACKEND_H_
