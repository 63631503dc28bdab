#include "engine/kv/kv_handoff.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pdserve {

int64_t KvHandoff::pages() const {
  if (shape.page_size <= 0) return 0;
  const int64_t n = static_cast<int64_t>(tokens.size());
  return (n + shape.page_size - 1) / shape.page_size;
}

namespace {

absl::Status LayoutDiffers(const char* field, int64_t from, int64_t to) {
  return absl::FailedPreconditionError(absl::StrCat(
      "hand-off KV layout differs: ", field, " ", from, " != ", to));
}

absl::Status CheckShape(const KvHandoffShape& from, const KvHandoffShape& to) {
  if (from.num_layers != to.num_layers) {
    return LayoutDiffers("num_layers", from.num_layers, to.num_layers);
  }
  if (from.kv_dim != to.kv_dim) {
    return LayoutDiffers("kv_dim", from.kv_dim, to.kv_dim);
  }
  if (from.page_size != to.page_size) {
    return LayoutDiffers("page_size", from.page_size, to.page_size);
  }
  if (from.dtype != to.dtype) {
    return absl::FailedPreconditionError(
        absl::StrCat("hand-off KV layout differs: kv_dtype ",
                     KvDTypeName(from.dtype), " != ", KvDTypeName(to.dtype)));
  }
  if (from.page_bytes != to.page_bytes) {
    return LayoutDiffers("page_bytes", from.page_bytes, to.page_bytes);
  }
  if (from.linear_state_bytes != to.linear_state_bytes) {
    return LayoutDiffers("linear_state_bytes", from.linear_state_bytes,
                         to.linear_state_bytes);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SequenceState> ValidateHandoff(const KvHandoff& h,
                                              const std::string& model,
                                              const KvHandoffShape& shape,
                                              int64_t decode_capacity) {
  if (h.model != model) {
    return absl::FailedPreconditionError(
        absl::StrCat("hand-off of model '", h.model,
                     "' cannot be decoded by model '", model, "'"));
  }
  if (absl::Status s = CheckShape(h.shape, shape); !s.ok()) return s;
  std::vector<int32_t> mask(h.mask.begin(), h.mask.end());
  absl::StatusOr<SequenceState> state =
      SequenceState::FromMask(mask, h.capacity, decode_capacity);
  if (!state.ok()) return state.status();
  if (state->next_pos() != static_cast<int64_t>(h.tokens.size()) ||
      h.tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hand-off mask marks ", state->next_pos(), " positions valid for ",
        h.tokens.size(), " tokens"));
  }
  const int64_t want_kv = h.pages() * shape.page_bytes;
  if (static_cast<int64_t>(h.kv.size()) != want_kv) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hand-off holds ", h.kv.size(), " bytes of KV pages; ", h.pages(),
        " pages of ", shape.page_bytes, " bytes need ", want_kv));
  }
  if (static_cast<int64_t>(h.linear_state.size()) !=
      shape.linear_state_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hand-off holds ", h.linear_state.size(),
        " bytes of linear-attention state; the model needs ",
        shape.linear_state_bytes));
  }
  return state;
}

HandoffTable::HandoffTable(int64_t max_bytes, int64_t ttl_ns, uint64_t id_salt)
    : max_bytes_(max_bytes), ttl_ns_(ttl_ns), salt_(id_salt) {}

uint64_t HandoffTable::Put(KvHandoff h, int64_t now_ns) {
  const int64_t size = h.bytes();
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(now_ns);
  if (size > max_bytes_) return 0;
  while (bytes_ + size > max_bytes_ && !order_.empty()) {
    EraseLocked(order_.front());
    ++dropped_;
  }
  uint64_t id = 0;
  while (id == 0 || entries_.contains(id)) id = salt_ + ++next_;
  bytes_ += size;
  entries_.emplace(id, Entry{std::move(h), now_ns, size});
  order_.push_back(id);
  return id;
}

std::optional<KvHandoff> HandoffTable::Take(uint64_t id, int64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(now_ns);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  KvHandoff h = std::move(it->second.handoff);
  EraseLocked(id);
  return h;
}

void HandoffTable::ExpireLocked(int64_t now_ns) {
  while (!order_.empty()) {
    auto it = entries_.find(order_.front());
    if (it != entries_.end() && now_ns - it->second.put_ns < ttl_ns_) return;
    if (it != entries_.end()) ++dropped_;
    EraseLocked(order_.front());
  }
}

void HandoffTable::EraseLocked(uint64_t id) {
  auto it = entries_.find(id);
  if (it != entries_.end()) {
    bytes_ -= it->second.bytes;
    entries_.erase(it);
  }
  auto pos = std::find(order_.begin(), order_.end(), id);
  if (pos != order_.end()) order_.erase(pos);
}

int64_t HandoffTable::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

int64_t HandoffTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(entries_.size());
}

int64_t HandoffTable::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

}  // namespace pdserve
