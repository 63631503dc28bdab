#include "engine/kv/kv_ledger.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pdserve {

KvLedger::KvLedger(int64_t num_pages, int64_t page_size, bool prefix_cache)
    : page_size_(page_size), pages_(num_pages) {
  if (prefix_cache) {
    prefix_ = std::make_unique<PrefixCache>(num_pages, page_size);
  }
}

int64_t KvLedger::PagesFor(int64_t tokens) const {
  return tokens <= 0 ? 0 : (tokens + page_size_ - 1) / page_size_;
}

std::vector<int32_t> KvLedger::Match(absl::Span<const int32_t> tokens,
                                     int64_t max_pages) const {
  if (prefix_ == nullptr || max_pages <= 0) return {};
  return prefix_->Match(tokens, max_pages);
}

int64_t KvLedger::UnheldPages(absl::Span<const int32_t> pages) const {
  int64_t n = 0;
  for (int32_t p : pages) n += pages_.in_use(p) ? 0 : 1;
  return n;
}

absl::Status KvLedger::Open(SequenceId id, absl::Span<const int32_t> prefix,
                            std::vector<int32_t> index_tokens) {
  if (seqs_.contains(id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("sequence ", id, " already has a KV account"));
  }
  for (int32_t p : prefix) {
    if (prefix_ == nullptr || !prefix_->Contains(p)) {
      return absl::FailedPreconditionError(
          absl::StrCat("KV page ", p, " holds no indexed prefix"));
    }
  }
  Account a;
  for (int32_t p : prefix) {
    if (absl::Status s = pages_.Retain(p); !s.ok()) {
      for (int32_t q : a.pages) (void)pages_.Free(q, /*keep_cached=*/true);
      return s;
    }
    a.pages.push_back(p);
  }
  a.written = static_cast<int64_t>(a.pages.size()) * page_size_;
  a.indexed_pages = static_cast<int64_t>(a.pages.size());
  a.prefix_pages = a.indexed_pages;
  a.index_tokens = std::move(index_tokens);
  seqs_.emplace(id, std::move(a));
  return absl::OkStatus();
}

int64_t KvLedger::PagesNeeded(SequenceId id, int64_t num_tokens) const {
  auto it = seqs_.find(id);
  const int64_t have =
      it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.pages.size());
  return std::max<int64_t>(0, PagesFor(num_tokens) - have);
}

absl::StatusOr<std::vector<int32_t>> KvLedger::Grow(SequenceId id,
                                                    int64_t num_tokens) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("sequence ", id, " has no KV account"));
  }
  const int64_t need = PagesNeeded(id, num_tokens);
  if (need > pages_.num_free()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "sequence ", id, " needs ", need, " more KV pages for ", num_tokens,
        " tokens; ", pages_.num_free(), " of ", pages_.num_pages(),
        " pages are free"));
  }
  std::vector<int32_t> fresh;
  fresh.reserve(static_cast<size_t>(need));
  for (int64_t i = 0; i < need; ++i) {
    int32_t reclaimed = -1;
    const int32_t page = *pages_.Allocate(&reclaimed);
    if (reclaimed >= 0 && prefix_ != nullptr) prefix_->Erase(reclaimed);
    fresh.push_back(page);
    it->second.pages.push_back(page);
  }
  return fresh;
}

void KvLedger::MarkWritten(SequenceId id, int64_t written) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  Account& a = it->second;
  a.written = std::max(a.written, written);
  if (prefix_ == nullptr) return;
  const int64_t known = std::min<int64_t>(
      a.written, static_cast<int64_t>(a.index_tokens.size()));
  const absl::Span<const int32_t> tokens(a.index_tokens);
  for (int64_t k = a.indexed_pages;
       (k + 1) * page_size_ <= known &&
       k < static_cast<int64_t>(a.pages.size());
       ++k) {
    prefix_->Insert(k == 0 ? -1 : a.pages[k - 1], a.pages[k],
                    tokens.subspan(k * page_size_, page_size_));
    a.indexed_pages = k + 1;
  }
}

void KvLedger::Close(SequenceId id, bool written) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  const Account& a = it->second;
  for (size_t k = 0; k < a.pages.size(); ++k) {
    const int32_t p = a.pages[k];
    const bool own_index = static_cast<int64_t>(k) >= a.prefix_pages &&
                           static_cast<int64_t>(k) < a.indexed_pages;
    if (!written && own_index && prefix_ != nullptr) prefix_->Erase(p);
    (void)pages_.Free(p, prefix_ != nullptr && prefix_->Contains(p));
  }
  seqs_.erase(it);
}

absl::Span<const int32_t> KvLedger::Pages(SequenceId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return {};
  return it->second.pages;
}

}  // namespace pdserve
