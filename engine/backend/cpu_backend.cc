#include "engine/backend/cpu_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace pdserve {

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(
    const ModelWeights& weights, KvStorage& kv, ThreadPool& threads,
    int64_t max_batch_tokens) {
  absl::StatusOr<std::unique_ptr<ForwardPass>> fp =
      ForwardPass::Create(weights, kv, threads, max_batch_tokens);
  if (!fp.ok()) return fp.status();
  std::unique_ptr<CpuBackend> b(new CpuBackend());
  b->forward_ = std::move(*fp);
  if (absl::Status s = b->InitVision(threads); !s.ok()) return s;
  return b;
}

absl::Status CpuBackend::InitVision(ThreadPool& threads) {
  // The encoder multiplies by the packed copies the forward pass made.
  const ModelWeights& weights = forward_->packed_weights();
  if (!weights.config.vision.present()) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<VisionEncoder>> v =
      VisionEncoder::Create(weights, threads);
  if (!v.ok()) return v.status();
  vision_ = std::move(*v);
  return absl::OkStatus();
}

absl::Status CpuBackend::EncodeImage(const ImagePatches& image,
                                     absl::Span<float> out) {
  if (vision_ == nullptr) return ForwardBackend::EncodeImage(image, out);
  return vision_->Encode(image, out);
}

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::CreateOwning(
    const ModelWeights& weights, const KvGeometry& geometry, int num_threads,
    int64_t max_batch_tokens, std::string description) {
  if (num_threads < 1 || max_batch_tokens < 1 || geometry.max_sequences < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CPU backend: num_threads (", num_threads, "), max_batch_tokens (",
        max_batch_tokens, ") and max_sequences (", geometry.max_sequences,
        ") must be >= 1"));
  }
  const int64_t state_floats = weights.config.linear_state_floats();
  if (state_floats * 4 > geometry.linear_state_bytes_per_sequence) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CPU backend: the model's linear state needs ", state_floats * 4,
        " bytes per sequence; the geometry gives ",
        geometry.linear_state_bytes_per_sequence));
  }
  absl::StatusOr<std::unique_ptr<KvStorage>> kv =
      KvStorage::Create(geometry.num_layers, geometry.kv_dim,
                        geometry.page_size, geometry.num_pages,
                        geometry.dtype, geometry.head_dim,
                        geometry.huge_pages);
  if (!kv.ok()) return kv.status();
  std::unique_ptr<CpuBackend> b(new CpuBackend());
  b->description_ = std::move(description);
  b->owned_threads_ = std::make_unique<ThreadPool>(num_threads);
  b->owned_kv_ = std::move(*kv);
  b->state_floats_ = state_floats;
  b->num_slots_ = geometry.max_sequences;
  if (state_floats > 0) {
    b->states_.assign(static_cast<size_t>(state_floats * b->num_slots_), 0.f);
  }
  b->spans_.reserve(static_cast<size_t>(max_batch_tokens));
  absl::StatusOr<std::unique_ptr<ForwardPass>> fp = ForwardPass::Create(
      weights, *b->owned_kv_, *b->owned_threads_, max_batch_tokens);
  if (!fp.ok()) return fp.status();
  b->forward_ = std::move(*fp);
  if (absl::Status s = b->InitVision(*b->owned_threads_); !s.ok()) return s;
  return b;
}

CpuBackend::~CpuBackend() = default;

int64_t CpuBackend::max_batch_tokens() const {
  return forward_->max_batch_tokens();
}

int64_t CpuBackend::max_positions() const { return forward_->max_positions(); }

absl::Status CpuBackend::Run(absl::Span<const SequenceSpan> batch,
                             absl::Span<float> logits, ForwardStats* stats) {
  if (owned_kv_ == nullptr) return forward_->Run(batch, logits, stats);
  // Owning mode: the state lives here, named by slot; the caller's
  // linear_state pointers (host memory of the engine's pool) are ignored.
  if (static_cast<int64_t>(batch.size()) > forward_->max_batch_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CPU backend: ", batch.size(), " spans exceed max_batch_tokens ",
        forward_->max_batch_tokens()));
  }
  spans_.clear();
  for (const SequenceSpan& in : batch) {
    SequenceSpan s = in;
    s.linear_state = nullptr;
    if (state_floats_ > 0) {
      if (in.state_slot < 0 || in.state_slot >= num_slots_) {
        return absl::InvalidArgumentError(
            absl::StrCat("CPU backend: state_slot ", in.state_slot,
                         " is outside [0, ", num_slots_, ")"));
      }
      s.linear_state = states_.data() + in.state_slot * state_floats_;
    }
    spans_.push_back(s);
  }
  return forward_->Run(spans_, logits, stats);
}

}  // namespace pdserve
