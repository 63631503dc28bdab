#include "engine/model/sequence_runner.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace pdserve {
namespace {
constexpr int64_t kPageSize = 16;
}  // namespace

absl::StatusOr<std::unique_ptr<SequenceRunner>> SequenceRunner::Create(
    const ModelWeights& weights, ThreadPool& pool, int64_t capacity,
    int64_t max_chunk, KvDType kv_dtype) {
  const int64_t context = weights.config.max_context;
  if (capacity < 1 || max_chunk < 1 || (context > 0 && capacity > context)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence capacity ", capacity, " must be in [1, ", context,
        "] (the model's context) and max_chunk ", max_chunk, " >= 1"));
  }
  const ModelConfig& c = weights.config;
  if (c.num_kv_layers() > 0) {
    if (absl::Status s = CheckKvDType(kv_dtype, c.kv_dim(), c.head_dim);
        !s.ok()) {
      return s;
    }
  }
  auto runner = std::unique_ptr<SequenceRunner>(
      new SequenceRunner(weights, pool, capacity, max_chunk, kv_dtype));
  auto fp = ForwardPass::Create(weights, runner->kv_, pool,
                                std::min(capacity, max_chunk));
  if (!fp.ok()) return fp.status();
  runner->forward_ = std::move(*fp);
  return runner;
}

SequenceRunner::SequenceRunner(const ModelWeights& weights, ThreadPool& pool,
                               int64_t capacity, int64_t max_chunk,
                               KvDType kv_dtype)
    : weights_(weights),
      capacity_(capacity),
      max_chunk_(max_chunk),
      kv_(weights.config.num_kv_layers(), weights.config.kv_dim(), kPageSize,
          (capacity + kPageSize - 1) / kPageSize, kv_dtype,
          weights.config.head_dim),
      pages_((capacity + kPageSize - 1) / kPageSize),
      logits_(weights.config.vocab_size),
      linear_state_(weights.config.linear_state_floats()) {
  std::iota(pages_.begin(), pages_.end(), 0);
}

absl::StatusOr<absl::Span<const float>> SequenceRunner::Feed(
    absl::Span<const int32_t> tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) {
    return absl::InvalidArgumentError("SequenceRunner::Feed: no tokens");
  }
  if (position_ + n > capacity_) {
    return absl::OutOfRangeError(absl::StrCat(
        "sequence at position ", position_, " cannot take ", n,
        " more tokens: capacity is ", capacity_));
  }
  for (int64_t done = 0; done < n;) {
    const int64_t chunk = std::min(max_chunk_, n - done);
    SequenceSpan span;
    span.tokens = tokens.subspan(done, chunk);
    span.start_pos = position_;
    span.page_table = pages_;
    if (!linear_state_.empty()) span.linear_state = linear_state_.data();
    absl::Status s =
        forward_->Run({&span, 1}, absl::MakeSpan(logits_), &stats_);
    if (!s.ok()) return s;
    position_ += chunk;
    done += chunk;
  }
  return absl::Span<const float>(logits_);
}

}  // namespace pdserve
