// Automatic prefix caching: an index of full KV pages by content, so that a
// sequence whose prompt starts with tokens another sequence already wrote
// reuses those pages instead of recomputing them (a shared system prompt, a
// chat history growing turn by turn, a preempted request re-admitted).
//
// A page is identified by its tokens and by the page before it, so a match
// is exact: lookups hash (parent page, parent generation, tokens) and then
// compare the stored tokens and parent. Reusing a page for other content
// (Erase) bumps its generation, which orphans every page indexed after it:
// they can no longer match, and age out of the allocator's cache like any
// unreferenced page. Pure (no IO, no clock); thread-compatible.
#ifndef PDSERVE_ENGINE_KV_PREFIX_CACHE_H_
#define PDSERVE_ENGINE_KV_PREFIX_CACHE_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace pdserve {

class PrefixCache {
 public:
  PrefixCache(int64_t num_pages, int64_t page_size);

  int64_t page_size() const { return page_size_; }
  // Whether `page` is indexed (holds a known, matchable page of tokens).
  bool Contains(int32_t page) const { return indexed_[page] != 0; }
  int64_t size() const { return static_cast<int64_t>(by_key_.size()); }

  // The pages holding tokens[0, k * page_size) for the largest k <=
  // max_pages such that every page matches, in order. Empty when the first
  // page is not indexed.
  std::vector<int32_t> Match(absl::Span<const int32_t> tokens,
                             int64_t max_pages) const;
  // Indexes `page` as holding `tokens` (exactly page_size of them) after
  // `parent` (-1 for the first page of a sequence). No-op when the same
  // content is indexed already (another page holds it), when `page` is
  // indexed, or when `parent` is not indexed.
  void Insert(int32_t parent, int32_t page, absl::Span<const int32_t> tokens);
  // Forgets `page` (it is about to hold other data). No-op when not indexed.
  void Erase(int32_t page);

 private:
  uint64_t Key(int32_t parent, absl::Span<const int32_t> tokens) const;
  bool Holds(int32_t page, int32_t parent,
             absl::Span<const int32_t> tokens) const;

  int64_t page_size_;
  std::vector<int32_t> tokens_;       // [page][page_size]
  std::vector<int32_t> parent_;       // -1 for a first page
  std::vector<uint32_t> parent_gen_;  // the parent's generation at Insert
  std::vector<uint32_t> generation_;  // bumped by Erase
  std::vector<uint8_t> indexed_;
  std::vector<uint64_t> key_;  // of an indexed page
  absl::flat_hash_map<uint64_t, int32_t> by_key_;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_KV_PREFIX_CACHE_H_
