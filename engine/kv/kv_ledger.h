// KvLedger: the one account of KV pages, kept by the scheduler (as vLLM's KV
// cache manager and TGI's block allocator are): which pages each sequence
// holds, which are free, and which full pages hold a known prompt prefix
// (PrefixCache). The scheduler's policy plans with it, so an admission sees
// the real free pages and the prefix hit of a new request before it is
// planned, and a prefix shared by several sequences is counted once; the
// plans carry the page ids it chose, and the engine's KvPool takes exactly
// those pages (KvPool::AssignPages / AssignPrefix), validating them.
//
// The engine keeps the same index by the same rule (KvPool::IndexWritten
// over the tokens the ledger indexes: the leading `index_tokens` of each
// admission), in the same order, so a prefix the ledger finds is one the
// engine's index holds. Pure (no IO, no clock); thread-compatible.
#ifndef PDSERVE_ENGINE_KV_KV_LEDGER_H_
#define PDSERVE_ENGINE_KV_KV_LEDGER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/kv/page_allocator.h"
#include "engine/kv/prefix_cache.h"
#include "engine/kv/sequence_id.h"

namespace pdserve {

class KvLedger {
 public:
  // `num_pages` pages of `page_size` tokens; with `prefix_cache`, full
  // prompt pages are indexed by content and kept (as free, reclaimable
  // pages) after their sequences end.
  KvLedger(int64_t num_pages, int64_t page_size, bool prefix_cache);

  int64_t page_size() const { return page_size_; }
  int64_t num_pages() const { return pages_.num_pages(); }
  // Free pages, the cached (reclaimable) ones included.
  int64_t free_pages() const { return pages_.num_free(); }
  int64_t cached_pages() const { return pages_.num_cached(); }
  bool prefix_cache() const { return prefix_ != nullptr; }
  // Pages of `tokens` tokens.
  int64_t PagesFor(int64_t tokens) const;

  // The indexed pages holding the longest prefix of `tokens`, at most
  // `max_pages`; no change. Empty without a prefix cache.
  std::vector<int32_t> Match(absl::Span<const int32_t> tokens,
                             int64_t max_pages) const;
  // Of `pages` (a Match result), those no live sequence holds: taking them
  // uses free pages.
  int64_t UnheldPages(absl::Span<const int32_t> pages) const;

  // Opens the account of `id` with the shared `prefix` pages (a Match
  // result; one more reference each). `index_tokens`: the leading tokens of
  // the sequence Index may index (its known prompt). ALREADY_EXISTS for a
  // live id; FAILED_PRECONDITION for a prefix page that is not indexed.
  absl::Status Open(SequenceId id, absl::Span<const int32_t> prefix,
                    std::vector<int32_t> index_tokens);
  // Pages `id` needs to hold `num_tokens` positions beyond those it has.
  int64_t PagesNeeded(SequenceId id, int64_t num_tokens) const;
  // Gives `id` pages for positions [0, num_tokens): plain free pages first,
  // then the least recently cached (dropped from the index). Returns the
  // new pages, in order; all-or-nothing RESOURCE_EXHAUSTED naming the
  // numbers. NOT_FOUND for an unknown id.
  absl::StatusOr<std::vector<int32_t>> Grow(SequenceId id, int64_t num_tokens);
  // Records that positions [0, written) of `id` hold data and indexes its
  // full pages among them whose tokens are known (its index_tokens).
  void MarkWritten(SequenceId id, int64_t written);
  // Closes the account: each page loses a reference; an indexed page with
  // none left stays cached. With `written` false (the engine may not have
  // run its plans: a cancelled or refused admission), the pages it indexed
  // itself leave the index instead. No-op for an unknown id.
  void Close(SequenceId id, bool written = true);

  bool Contains(SequenceId id) const { return seqs_.contains(id); }
  // Pages `id` holds, in position order (empty when unknown).
  absl::Span<const int32_t> Pages(SequenceId id) const;

 private:
  struct Account {
    std::vector<int32_t> pages;
    std::vector<int32_t> index_tokens;
    int64_t written = 0;
    int64_t prefix_pages = 0;  // leading pages shared from the index at Open
    int64_t indexed_pages = 0;
  };

  int64_t page_size_;
  PageAllocator pages_;
  std::unique_ptr<PrefixCache> prefix_;  // null without a prefix cache
  absl::flat_hash_map<SequenceId, Account> seqs_;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_KV_KV_LEDGER_H_
