// EngineCore's prefill/decode hand-off (kv_handoff.h): marking a sequence
// for export, snapshotting it when its prefill ends, importing one.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/engine_core_impl.h"
#include "engine/kv/kv_handoff.h"

namespace pdserve {

absl::Status EngineCore::Impl::MarkForExport(SequenceId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown sequence ", id));
  }
  if (!pool_->has_storage()) {
    return absl::FailedPreconditionError(
        "this engine's KV lives on a device; it cannot hand a prefill off");
  }
  it->second->export_kv = true;
  return absl::OkStatus();
}

void EngineCore::Impl::ExportFinished(const EngineSequence& seq) {
  const int64_t n = seq.state.next_pos();
  if (n <= 0) return;
  KvHandoff h;
  h.shape = pool_->HandoffShape();
  h.capacity = options_.max_seq_len;
  h.tokens.assign(seq.tokens.begin(), seq.tokens.begin() + n);
  h.mask.assign(static_cast<size_t>(h.capacity), 0);
  std::fill(h.mask.begin(), h.mask.begin() + n, 1);
  if (pool_->ExportPages(seq.id, n, &h.kv, &h.linear_state).ok()) {
    exports_.emplace_back(seq.id, std::move(h));
  }
}

absl::Status EngineCore::Impl::ImportKv(SequenceId id,
                                        const KvHandoff& handoff,
                                        const std::string& model) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown sequence ", id));
  }
  EngineSequence& seq = *it->second;
  absl::StatusOr<SequenceState> contract = ValidateHandoff(
      handoff, model, pool_->HandoffShape(), options_.max_seq_len);
  if (!contract.ok()) return contract.status();
  const int64_t n = static_cast<int64_t>(handoff.tokens.size());
  if (seq.state.next_pos() != 0 || seq.cached_skip != 0 ||
      seq.finish != FinishReason::kNone) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sequence ", id, " has started; a hand-off goes into a new one"));
  }
  if (n >= seq.prompt_len ||
      !std::equal(handoff.tokens.begin(), handoff.tokens.end(),
                  seq.tokens.begin())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", id, ": the hand-off's ", n,
        " tokens are not a proper prefix of its prompt of ", seq.prompt_len,
        " tokens"));
  }
  if (absl::Status s = pool_->ImportPages(id, n, handoff.kv,
                                          handoff.linear_state);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = seq.state.Advance(n); !s.ok()) return s;
  seq.cached_skip = n;
  return absl::OkStatus();
}

}  // namespace pdserve
