// Per-sequence position state and the checks of the fixed-shape KV capacity
// contract (../shared/DESIGN.md). Pure: no IO, no clock.
//
// Documented error messages (the numbers vary):
//   CheckPromptFits      INVALID_ARGUMENT
//     "prompt of 600 tokens is longer than the sequence capacity
//      max_seq_len=512"
//   CheckCapacityMatch   FAILED_PRECONDITION
//     "prefill KV capacity 512 != decode KV capacity 1024"
//   CheckMaskValues      INVALID_ARGUMENT
//     "mask value 2 at position 7 is not 0 or 1"
//   CheckMaskPrefix      INVALID_ARGUMENT
//     "mask is not a contiguous prefix: position 5 is valid after invalid
//      position 3"
//   CheckDecodeCapacity  OUT_OF_RANGE
//     "decode step at position 512 exceeds the sequence capacity
//      max_seq_len=512"
//   CheckMaxSeqLen       INVALID_ARGUMENT
//     "max_seq_len=4096 exceeds the model context length 2048" /
//     "max_seq_len=4096 exceeds the KV pool capacity of 1024 tokens" /
//     "max_seq_len must be positive, got 0"
#ifndef PDSERVE_ENGINE_KV_SEQUENCE_STATE_H_
#define PDSERVE_ENGINE_KV_SEQUENCE_STATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace pdserve {

absl::Status CheckPromptFits(int64_t prompt_len, int64_t max_seq_len);
absl::Status CheckCapacityMatch(int64_t prefill_capacity,
                                int64_t decode_capacity);
absl::Status CheckMaskValues(absl::Span<const int32_t> mask);
// Assumes values are 0/1 (run CheckMaskValues first).
absl::Status CheckMaskPrefix(absl::Span<const int32_t> mask);
// OK when a token can still be written at `next_pos`.
absl::Status CheckDecodeCapacity(int64_t next_pos, int64_t max_seq_len);
absl::Status CheckMaxSeqLen(int64_t max_seq_len, int64_t model_context,
                            int64_t pool_tokens);
// The engine's sequence capacity, the one capacity a user writes
// (--max-seq-len): `requested` tokens (prompt + generated), or when it is 0
// the model's context length capped by the pool's tokens. The only place
// that rule lives: EngineInfo.max_seq_len carries the result to the
// scheduler and the front end. INVALID_ARGUMENT (CheckMaxSeqLen's messages)
// for a request below 0, above the context length or above the pool.
absl::StatusOr<int64_t> ResolveMaxSeqLen(int64_t requested,
                                         int64_t model_context,
                                         int64_t pool_tokens);

// A fixed-width validity mask of `capacity` (= max_seq_len) positions with
// prefix semantics: positions [0, next_pos) are valid, the rest not.
// next_pos is the count of valid positions; Advance(n) sets
// mask[next_pos .. next_pos + n). The RoPE position of the next token is
// next_pos + rope_delta (rope_delta: multimodal position offset, 0 for
// text). Value type; the mask is allocated once at creation.
class SequenceState {
 public:
  // INVALID_ARGUMENT for capacity <= 0.
  static absl::StatusOr<SequenceState> Create(int64_t capacity,
                                              int64_t rope_delta = 0);
  // Rebuilds the state of a sequence handed over from another pool or
  // process: checks prefill capacity == decode capacity, the mask's width,
  // its values and its prefix shape; next_pos = sum(mask).
  static absl::StatusOr<SequenceState> FromMask(
      absl::Span<const int32_t> mask, int64_t prefill_capacity,
      int64_t decode_capacity, int64_t rope_delta = 0);

  int64_t capacity() const { return static_cast<int64_t>(mask_.size()); }
  int64_t next_pos() const { return next_pos_; }
  int64_t rope_delta() const { return rope_delta_; }
  // RoPE position of the next token written.
  int64_t rope_position() const { return next_pos_ + rope_delta_; }
  int64_t remaining() const { return capacity() - next_pos_; }
  bool full() const { return next_pos_ == capacity(); }
  absl::Span<const uint8_t> mask() const { return mask_; }

  // Marks the next n positions valid. OUT_OF_RANGE when fewer than n
  // remain (n == 1: CheckDecodeCapacity's message; n > 1: "chunk of 7 tokens
  // at position 510 exceeds the sequence capacity max_seq_len=512"); the
  // state is then unchanged. n >= 1.
  absl::Status Advance(int64_t n = 1);

 private:
  SequenceState(int64_t capacity, int64_t rope_delta)
      : mask_(static_cast<size_t>(capacity), 0), rope_delta_(rope_delta) {}
  std::vector<uint8_t> mask_;
  int64_t next_pos_ = 0;
  int64_t rope_delta_ = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_KV_SEQUENCE_STATE_H_
