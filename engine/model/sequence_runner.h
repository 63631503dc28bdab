// Runs one sequence through a ForwardPass with its own small KV storage:
// the simplest driver for `pdserve generate`, benchmarks and tests (the
// serving path uses EngineCore and the KV pool instead).
#ifndef PDSERVE_ENGINE_MODEL_SEQUENCE_RUNNER_H_
#define PDSERVE_ENGINE_MODEL_SEQUENCE_RUNNER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/kv/kv_storage.h"
#include "engine/model/forward.h"
#include "engine/model_weights.h"
#include "kernels/thread_pool.h"

namespace pdserve {

// Owns a KV storage for `capacity` positions of one sequence and feeds it
// tokens chunk by chunk (at most `max_chunk` per forward pass). Logits of the
// last fed token are kept in a buffer allocated once. Thread-compatible;
// `weights` and `pool` must outlive it.
class SequenceRunner {
 public:
  // Keys and values are stored as `kv_dtype`. INVALID_ARGUMENT when
  // capacity or max_chunk < 1, capacity exceeds the model's context length,
  // or the dtype cannot store the model's heads (CheckKvDType).
  static absl::StatusOr<std::unique_ptr<SequenceRunner>> Create(
      const ModelWeights& weights, ThreadPool& pool, int64_t capacity,
      int64_t max_chunk, KvDType kv_dtype = KvDType::kF32);

  // Processes `tokens` at the current position (in chunks of max_chunk).
  // Returns the logits (vocab floats) of the last token, valid until the
  // next call. OUT_OF_RANGE when the capacity would be exceeded; errors of
  // ForwardPass::Run otherwise.
  absl::StatusOr<absl::Span<const float>> Feed(
      absl::Span<const int32_t> tokens);

  // Forgets the sequence (position 0); the KV memory is reused.
  void Reset() { position_ = 0; }

  int64_t position() const { return position_; }
  int64_t capacity() const { return capacity_; }
  const ForwardStats& stats() const { return stats_; }
  const KvStorage& kv() const { return kv_; }

 private:
  SequenceRunner(const ModelWeights& weights, ThreadPool& pool,
                 int64_t capacity, int64_t max_chunk, KvDType kv_dtype);

  const ModelWeights& weights_;
  int64_t capacity_;
  int64_t max_chunk_;
  KvStorage kv_;
  std::unique_ptr<ForwardPass> forward_;
  std::vector<int32_t> pages_;
  std::vector<float> logits_;
  std::vector<float> linear_state_;  // hybrid models: conv + recurrent state
  int64_t position_ = 0;
  ForwardStats stats_;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_MODEL_SEQUENCE_RUNNER_H_
