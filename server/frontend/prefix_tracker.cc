#include "server/frontend/prefix_tracker.h"

namespace pdserve::frontend {
uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::vector<uint64_t> PageChain(absl::Span<const int32_t> prompt,
                                int64_t page_tokens) {
  std::vector<uint64_t> chain;
  if (page_tokens <= 0) return chain;
  uint64_t h = 0x243f6a8885a308d3ull;
  const size_t page = static_cast<size_t>(page_tokens);
  for (size_t end = page; end <= prompt.size(); end += page) {
    for (size_t i = end - page; i < end; ++i) {
      h = SplitMix64(h ^ static_cast<uint32_t>(prompt[i]));
    }
    chain.push_back(h);
  }
  return chain;
}

int64_t PrefixTracker::Matched(const std::string& cell,
                               absl::Span<const uint64_t> chain) const {
  auto it = cells_.find(cell);
  if (it == cells_.end()) return 0;
  int64_t n = 0;
  while (n < static_cast<int64_t>(chain.size()) &&
         it->second.where.contains(chain[n])) {
    ++n;
  }
  return n;
}

void PrefixTracker::Record(const std::string& cell,
                           absl::Span<const uint64_t> chain) {
  if (capacity_ == 0 || chain.empty()) return;
  Cell& c = cells_[cell];
  // Deepest page first, so the first pages end up most recent (a prefix
  // outlives the tails that extend it, as in the KV ledger).
  for (auto h = chain.rbegin(); h != chain.rend(); ++h) {
    auto found = c.where.find(*h);
    if (found != c.where.end()) {
      c.order.splice(c.order.begin(), c.order, found->second);
    } else {
      c.order.push_front(*h);
      c.where.emplace(*h, c.order.begin());
    }
  }
  while (c.order.size() > capacity_) {
    c.where.erase(c.order.back());
    c.order.pop_back();
  }
}

}  // namespace pdserve::frontend
