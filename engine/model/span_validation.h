// Validation of a batch of SequenceSpans against a model and a paged KV
// storage, shared by every ForwardBackend (the CPU ForwardPass and device
// plugins) so all report the same INVALID_ARGUMENT messages. Header-only: a
// plugin uses it without linking the model library. Pure, thread-safe.
#ifndef PDSERVE_ENGINE_MODEL_SPAN_VALIDATION_H_
#define PDSERVE_ENGINE_MODEL_SPAN_VALIDATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "engine/model/forward.h"
#include "engine/model_config.h"

namespace pdserve {

// The limits a batch is checked against.
struct SpanLimits {
  int64_t max_positions = 0;     // longest sequence (positions)
  int64_t num_pages = 0;         // KV pages in the storage
  int64_t page_size = 0;         // tokens per page
  int64_t max_batch_tokens = 0;  // tokens in one batch
  // Hybrid models: spans must carry SequenceSpan::linear_state (host
  // backends); device backends use state_slot instead.
  bool require_linear_state = false;
};

// The multimodal fields of span i (mrope_positions, image_embeds).
inline absl::Status ValidateMultimodal(const SequenceSpan& s, size_t i,
                                       const ModelConfig& c) {
  if (!s.mrope_positions.empty() &&
      static_cast<int64_t>(s.mrope_positions.size()) != 3 * s.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "span ", i, ": ", s.mrope_positions.size(), " mRoPE positions for ",
        s.size(), " tokens (3 per token)"));
  }
  if (s.image_embeds == nullptr && s.image_rows == 0) return absl::OkStatus();
  int64_t placeholders = 0;
  for (int32_t t : s.tokens) {
    placeholders += t == c.vision.image_token_id ? 1 : 0;
  }
  if (s.image_embeds == nullptr || s.image_rows != placeholders ||
      !c.vision.present()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "span ", i, ": ", s.image_rows, " image embeddings",
        s.image_embeds == nullptr ? " (null)" : "", " for ", placeholders,
        " image placeholder tokens (id ", c.vision.image_token_id, ")",
        c.vision.present() ? "" : "; the model has no vision tower"));
  }
  return absl::OkStatus();
}

// OK, or INVALID_ARGUMENT naming the span and the numbers for: an empty span,
// start_pos < 0, a token id outside [0, vocab), a missing linear_state (when
// required), a span past max_positions, a page table too short or naming a
// page outside the storage, more than max_batch_tokens in all,
// mrope_positions other than 3 per token, image embeddings whose row count
// is not the span's number of image placeholder tokens. On success
// *pages_total (when non-null) is the number of page-table entries used.
inline absl::Status ValidateSpans(absl::Span<const SequenceSpan> batch,
                                  const ModelConfig& c, const SpanLimits& lim,
                                  int64_t* pages_total = nullptr) {
  int64_t total = 0, pages_sum = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceSpan& s = batch[i];
    if (s.tokens.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("span ", i, " has no tokens"));
    }
    if (s.start_pos < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("span ", i, ": start_pos ", s.start_pos, " < 0"));
    }
    for (size_t t = 0; t < s.tokens.size(); ++t) {
      if (s.tokens[t] < 0 || s.tokens[t] >= c.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("span ", i, ": token ", t, " has id ", s.tokens[t],
                         " outside the vocabulary [0, ", c.vocab_size, ")"));
      }
    }
    if (lim.require_linear_state && c.num_linear_layers() > 0 &&
        s.linear_state == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "span ", i, ": model ", c.name, " has linear-attention layers ",
          "but the span has no linear_state (", c.linear_state_floats(),
          " floats)"));
    }
    // Compared without forming start_pos + size, which overflows for a
    // start_pos near INT64_MAX (found by fuzzing the step decoder).
    if (s.start_pos > lim.max_positions - s.size()) {
      const bool overflows = s.start_pos > INT64_MAX - s.size();
      return absl::InvalidArgumentError(absl::StrCat(
          "span ", i, " reaches position ",
          overflows ? absl::StrCat(s.start_pos, " + ", s.size())
                    : absl::StrCat(s.start_pos + s.size()),
          " but at most ",
          lim.max_positions, " positions are supported (model context ",
          c.max_context, ", KV storage ", lim.num_pages * lim.page_size,
          " tokens)"));
    }
    const int64_t end = s.start_pos + s.size();
    const int64_t pages = (end + lim.page_size - 1) / lim.page_size;
    if (static_cast<int64_t>(s.page_table.size()) < pages) {
      return absl::InvalidArgumentError(
          absl::StrCat("span ", i, ": page table has ", s.page_table.size(),
                       " pages, positions [0, ", end, ") need ", pages, " of ",
                       lim.page_size, " tokens"));
    }
    for (int64_t p = 0; p < pages; ++p) {
      if (s.page_table[p] < 0 || s.page_table[p] >= lim.num_pages) {
        return absl::InvalidArgumentError(absl::StrCat(
            "span ", i, ": page table entry ", p, " is page ", s.page_table[p],
            ", outside the storage's ", lim.num_pages, " pages"));
      }
    }
    if (absl::Status m = ValidateMultimodal(s, i, c); !m.ok()) return m;
    total += s.size();
    pages_sum += pages;
  }
  if (total > lim.max_batch_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch has ", total, " tokens, more than max_batch_tokens ",
        lim.max_batch_tokens));
  }
  if (pages_total != nullptr) *pages_total = pages_sum;
  return absl::OkStatus();
}

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_MODEL_SPAN_VALIDATION_H_
