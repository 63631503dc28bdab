#include "engine/kv/sequence_state.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pdserve {

absl::Status CheckPromptFits(int64_t prompt_len, int64_t max_seq_len) {
  if (prompt_len > max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt of ", prompt_len,
        " tokens is longer than the sequence capacity max_seq_len=",
        max_seq_len));
  }
  return absl::OkStatus();
}

absl::Status CheckCapacityMatch(int64_t prefill_capacity,
                                int64_t decode_capacity) {
  if (prefill_capacity != decode_capacity) {
    return absl::FailedPreconditionError(
        absl::StrCat("prefill KV capacity ", prefill_capacity,
                     " != decode KV capacity ", decode_capacity));
  }
  return absl::OkStatus();
}

absl::Status CheckMaskValues(absl::Span<const int32_t> mask) {
  for (size_t i = 0; i < mask.size(); ++i) {
    if (mask[i] != 0 && mask[i] != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mask value ", mask[i], " at position ", i, " is not 0 or 1"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMaskPrefix(absl::Span<const int32_t> mask) {
  int64_t first_invalid = -1;
  for (size_t i = 0; i < mask.size(); ++i) {
    if (mask[i] == 0) {
      if (first_invalid < 0) first_invalid = static_cast<int64_t>(i);
    } else if (first_invalid >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mask is not a contiguous prefix: position ", i,
          " is valid after invalid position ", first_invalid));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDecodeCapacity(int64_t next_pos, int64_t max_seq_len) {
  if (next_pos >= max_seq_len) {
    return absl::OutOfRangeError(
        absl::StrCat("decode step at position ", next_pos,
                     " exceeds the sequence capacity max_seq_len=",
                     max_seq_len));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ResolveMaxSeqLen(int64_t requested,
                                         int64_t model_context,
                                         int64_t pool_tokens) {
  int64_t capacity = requested;
  if (requested == 0) {
    capacity = model_context > 0 ? std::min(model_context, pool_tokens)
                                 : pool_tokens;
  }
  if (absl::Status s = CheckMaxSeqLen(capacity, model_context, pool_tokens);
      !s.ok()) {
    return s;
  }
  return capacity;
}

absl::Status CheckMaxSeqLen(int64_t max_seq_len, int64_t model_context,
                            int64_t pool_tokens) {
  if (max_seq_len <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_seq_len must be positive, got ", max_seq_len));
  }
  if (model_context > 0 && max_seq_len > model_context) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_seq_len=", max_seq_len,
                     " exceeds the model context length ", model_context));
  }
  if (max_seq_len > pool_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_seq_len=", max_seq_len,
                     " exceeds the KV pool capacity of ", pool_tokens,
                     " tokens"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SequenceState> SequenceState::Create(int64_t capacity,
                                                    int64_t rope_delta) {
  if (capacity <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence capacity must be positive, got ", capacity));
  }
  return SequenceState(capacity, rope_delta);
}

absl::StatusOr<SequenceState> SequenceState::FromMask(
    absl::Span<const int32_t> mask, int64_t prefill_capacity,
    int64_t decode_capacity, int64_t rope_delta) {
  if (absl::Status s = CheckCapacityMatch(prefill_capacity, decode_capacity);
      !s.ok()) {
    return s;
  }
  if (static_cast<int64_t>(mask.size()) != decode_capacity) {
    return absl::InvalidArgumentError(
        absl::StrCat("mask width ", mask.size(),
                     " != sequence capacity ", decode_capacity));
  }
  if (absl::Status s = CheckMaskValues(mask); !s.ok()) return s;
  if (absl::Status s = CheckMaskPrefix(mask); !s.ok()) return s;
  absl::StatusOr<SequenceState> state = Create(decode_capacity, rope_delta);
  if (!state.ok()) return state.status();
  int64_t count = 0;
  for (int32_t v : mask) count += v;
  if (count > 0) {
    if (absl::Status s = state->Advance(count); !s.ok()) return s;
  }
  return state;
}

absl::Status SequenceState::Advance(int64_t n) {
  if (n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Advance needs n >= 1, got ", n));
  }
  if (n > remaining()) {
    if (n == 1) return CheckDecodeCapacity(next_pos_, capacity());
    return absl::OutOfRangeError(absl::StrCat(
        "chunk of ", n, " tokens at position ", next_pos_,
        " exceeds the sequence capacity max_seq_len=", capacity()));
  }
  for (int64_t i = 0; i < n; ++i) mask_[next_pos_ + i] = 1;
  next_pos_ += n;
  return absl::OkStatus();
}

}  // namespace pdserve
