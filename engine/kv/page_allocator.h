// PageAllocator: the KV page ledger's allocator, shared by the engine's
// KvPool and the scheduler's KvLedger (kv_ledger.h). Pure, no IO.
#ifndef PDSERVE_ENGINE_KV_PAGE_ALLOCATOR_H_
#define PDSERVE_ENGINE_KV_PAGE_ALLOCATOR_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pdserve {

// O(1) allocator of page indices [0, num_pages) with reference counts (a
// page shared by several sequences through the prefix cache is freed by the
// last of them). A page whose last reference goes may be kept as "cached":
// it still counts as free, but it is handed out again only when no plain
// free page is left, least recently released first. Pure, no IO.
// Thread-compatible.
class PageAllocator {
 public:
  explicit PageAllocator(int64_t num_pages);

  int64_t num_pages() const { return static_cast<int64_t>(refs_.size()); }
  // Free pages, cached ones included (they are reclaimed on demand).
  int64_t num_free() const {
    return static_cast<int64_t>(free_.size()) + num_cached_;
  }
  int64_t num_cached() const { return num_cached_; }
  int64_t num_used() const { return num_pages() - num_free(); }
  bool in_use(int32_t page) const { return refs_[page] > 0; }
  bool cached(int32_t page) const { return in_lru_[page] != 0; }

  // One reference to a page: a plain free one first, else the least
  // recently cached one (its index in *reclaimed, else -1 there).
  // RESOURCE_EXHAUSTED when no page is free.
  absl::StatusOr<int32_t> Allocate(int32_t* reclaimed = nullptr);
  // Another reference to a page in use or cached (a cached page leaves the
  // cache). FAILED_PRECONDITION for a free page or one out of range.
  absl::Status Retain(int32_t page);
  // Takes `page` itself, free or cached (one reference; a cached page
  // leaves the cache): for a caller that chose the page (a plan carrying
  // page ids from the scheduler's KvLedger). Sets *was_cached.
  // FAILED_PRECONDITION naming the page when it is out of range or in use.
  absl::Status Take(int32_t page, bool* was_cached = nullptr);
  // Whether `page` is free (plain or cached).
  bool is_free(int32_t page) const {
    return page >= 0 && page < num_pages() && refs_[page] == 0;
  }
  // Drops a reference; at the last one the page becomes free, or cached
  // when `keep_cached`. FAILED_PRECONDITION on a page out of range or not in
  // use (double free).
  absl::Status Free(int32_t page, bool keep_cached = false);

 private:
  void LinkLast(int32_t page);
  void Unlink(int32_t page);

  void PushFree(int32_t page);
  std::vector<int32_t> free_;  // stack of plain free pages
  std::vector<int32_t> free_pos_;  // index in free_, -1 when not there
  std::vector<int32_t> refs_;  // references per page
  // Cached pages: a doubly linked list, oldest first; index num_pages is
  // the sentinel.
  std::vector<int32_t> prev_, next_;
  std::vector<uint8_t> in_lru_;
  int64_t num_cached_ = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_KV_PAGE_ALLOCATOR_H_
