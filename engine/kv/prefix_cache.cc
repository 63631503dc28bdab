#include "engine/kv/prefix_cache.h"

#include <algorithm>

#include "absl/hash/hash.h"

namespace pdserve {

PrefixCache::PrefixCache(int64_t num_pages, int64_t page_size)
    : page_size_(page_size),
      tokens_(static_cast<size_t>(num_pages * page_size)),
      parent_(static_cast<size_t>(num_pages), -1),
      parent_gen_(static_cast<size_t>(num_pages), 0),
      generation_(static_cast<size_t>(num_pages), 0),
      indexed_(static_cast<size_t>(num_pages), 0),
      key_(static_cast<size_t>(num_pages), 0) {
  // At most one entry per page: Insert (called from a step) never rehashes.
  by_key_.reserve(static_cast<size_t>(num_pages));
}

uint64_t PrefixCache::Key(int32_t parent,
                          absl::Span<const int32_t> tokens) const {
  const uint32_t gen = parent < 0 ? 0 : generation_[parent];
  return absl::HashOf(parent, gen, tokens);
}

bool PrefixCache::Holds(int32_t page, int32_t parent,
                        absl::Span<const int32_t> tokens) const {
  if (!indexed_[page] || parent_[page] != parent) return false;
  if (parent >= 0 &&
      (!indexed_[parent] || parent_gen_[page] != generation_[parent])) {
    return false;
  }
  return std::equal(tokens.begin(), tokens.end(),
                    tokens_.begin() + page * page_size_);
}

std::vector<int32_t> PrefixCache::Match(absl::Span<const int32_t> tokens,
                                        int64_t max_pages) const {
  std::vector<int32_t> pages;
  const int64_t limit = std::min<int64_t>(
      max_pages, static_cast<int64_t>(tokens.size()) / page_size_);
  int32_t parent = -1;
  for (int64_t k = 0; k < limit; ++k) {
    const absl::Span<const int32_t> chunk =
        tokens.subspan(k * page_size_, page_size_);
    auto it = by_key_.find(Key(parent, chunk));
    if (it == by_key_.end() || !Holds(it->second, parent, chunk)) break;
    parent = it->second;
    pages.push_back(parent);
  }
  return pages;
}

void PrefixCache::Insert(int32_t parent, int32_t page,
                         absl::Span<const int32_t> tokens) {
  if (indexed_[page] || static_cast<int64_t>(tokens.size()) != page_size_) {
    return;
  }
  if (parent >= 0 && !indexed_[parent]) return;
  const uint64_t key = Key(parent, tokens);
  if (by_key_.contains(key)) return;  // this content (or a collision) is there
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + page * page_size_);
  parent_[page] = parent;
  parent_gen_[page] = parent < 0 ? 0 : generation_[parent];
  indexed_[page] = 1;
  key_[page] = key;
  by_key_.emplace(key, page);
}

void PrefixCache::Erase(int32_t page) {
  if (!indexed_[page]) return;
  by_key_.erase(key_[page]);
  indexed_[page] = 0;
  ++generation_[page];
}

}  // namespace pdserve
