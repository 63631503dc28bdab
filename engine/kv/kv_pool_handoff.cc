// KvPool's side of the prefill/decode hand-off: copying a sequence's pages
// and linear-attention state out of the pool and into another.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/kv/kv_pool.h"

namespace pdserve {

KvHandoffShape KvPool::HandoffShape() const {
  KvHandoffShape shape;
  shape.num_layers = geometry_.num_layers;
  shape.kv_dim = geometry_.kv_dim;
  shape.page_size = geometry_.page_size;
  shape.dtype = geometry_.dtype;
  shape.page_bytes = storage_ != nullptr ? storage_->bytes_per_page() : 0;
  shape.linear_state_bytes = geometry_.linear_state_bytes_per_sequence;
  return shape;
}

absl::Status KvPool::ExportPages(SequenceId id, int64_t num_tokens,
                                 std::string* kv,
                                 std::string* linear_state) const {
  if (storage_ == nullptr) {
    return absl::FailedPreconditionError(
        "this KV pool's keys and values live on a device; it cannot export "
        "them");
  }
  auto it = seqs_.find(id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("sequence ", id, " is not in the KV pool"));
  }
  const Sequence& seq = it->second;
  const int64_t pages =
      (num_tokens + geometry_.page_size - 1) / geometry_.page_size;
  if (num_tokens <= 0 || num_tokens > seq.written ||
      pages > static_cast<int64_t>(seq.pages.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", id, ": cannot export ", num_tokens,
                     " tokens; ", seq.written, " are written"));
  }
  const int64_t page_bytes = storage_->bytes_per_page();
  kv->reserve(kv->size() + static_cast<size_t>(pages * page_bytes));
  for (int64_t i = 0; i < pages; ++i) {
    const uint8_t* data = storage_->key_block(seq.pages[i], 0);
    kv->append(reinterpret_cast<const char*>(data),
               static_cast<size_t>(page_bytes));
  }
  const int64_t state_bytes = geometry_.linear_state_bytes_per_sequence;
  if (state_bytes > 0 && seq.slot >= 0 && linear_state_ != nullptr) {
    const float* state =
        const_cast<KvPool*>(this)->LinearStateOfSlot(seq.slot);
    linear_state->append(reinterpret_cast<const char*>(state),
                         static_cast<size_t>(state_bytes));
  }
  return absl::OkStatus();
}

absl::Status KvPool::ImportPages(SequenceId id, int64_t num_tokens,
                                 absl::string_view kv,
                                 absl::string_view linear_state) {
  if (storage_ == nullptr) {
    return absl::FailedPreconditionError(
        "this KV pool's keys and values live on a device; it cannot import "
        "a hand-off");
  }
  auto it = seqs_.find(id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("sequence ", id, " is not in the KV pool"));
  }
  const int64_t page_bytes = storage_->bytes_per_page();
  const int64_t pages =
      (num_tokens + geometry_.page_size - 1) / geometry_.page_size;
  const int64_t state_bytes = geometry_.linear_state_bytes_per_sequence;
  if (num_tokens <= 0 || static_cast<int64_t>(kv.size()) != pages * page_bytes ||
      static_cast<int64_t>(linear_state.size()) != state_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", id, ": a hand-off of ", num_tokens, " tokens needs ",
        pages * page_bytes, " bytes of pages and ", state_bytes,
        " of state; got ", kv.size(), " and ", linear_state.size()));
  }
  if (it->second.written != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sequence ", id, " already holds ", it->second.written,
        " tokens; a hand-off goes into a new sequence"));
  }
  if (!it->second.ledger) {
    if (absl::Status s = Reserve(id, num_tokens); !s.ok()) return s;
  } else if (static_cast<int64_t>(it->second.pages.size()) < pages) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sequence ", id, " holds ", it->second.pages.size(),
        " KV pages; the hand-off needs ", pages));
  }
  const Sequence& seq = it->second;
  for (int64_t i = 0; i < pages; ++i) {
    std::memcpy(storage_->key_block(seq.pages[i], 0), kv.data() + i * page_bytes,
                static_cast<size_t>(page_bytes));
  }
  if (state_bytes > 0 && seq.slot >= 0 && linear_state_ != nullptr) {
    std::memcpy(LinearStateOfSlot(seq.slot), linear_state.data(),
                static_cast<size_t>(state_bytes));
  }
  return MarkWritten(id, num_tokens);
}

}  // namespace pdserve
