// The cell router's prefix-hit rate against round-robin on a multi-turn
// trace (issue 17), replayed through the router's own pure code (PrefixKey,
// PickCell) with a model of each cell's prefix cache: the set of full-page
// prefixes (hash chains, as the KV ledger indexes them) its requests wrote.
// A request's hit is the longest run of its leading full pages the chosen
// cell holds (at most all but its last token, as the ledger keeps one to
// compute). No processes, no clock: it measures the policy, not the
// machine. Prints JSON: hit rate (cached prompt tokens / prompt tokens) for
// the router and for round-robin, and their ratio.
//
//   router_replay [--cells N] [--conversations N] [--turns N]
//                 [--system-tokens N] [--turn-tokens N] [--page N]
//                 [--cache-pages N]
// Conversations share one system prompt; each turn appends a user message
// and the previous reply; each round of turns arrives in a shuffled order
// (seeded: both policies see the same trace). Each cell caches at most
// --cache-pages pages, least recently used dropped first.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <algorithm>
#include <numeric>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_flags.h"
#include "nlohmann/json.hpp"
#include "server/frontend/cell_router.h"

namespace pdserve::frontend {
namespace {

struct Options {
  int cells = 4, conversations = 64, turns = 6, system_tokens = 512;
  int turn_tokens = 160, page = 16;
  int cache_pages = 1024;  // per cell, least recently used dropped first
};

// One cell's prefix cache: page-chain hashes, bounded, LRU.
class CellCache {
 public:
  explicit CellCache(size_t capacity) : capacity_(capacity) {}
  bool Contains(uint64_t h) const { return stamp_.contains(h); }
  void Touch(uint64_t h) {
    stamp_[h] = ++clock_;
    while (stamp_.size() > capacity_) {
      auto oldest = stamp_.begin();
      for (auto it = stamp_.begin(); it != stamp_.end(); ++it) {
        if (it->second < oldest->second) oldest = it;
      }
      stamp_.erase(oldest);
    }
  }

 private:
  size_t capacity_;
  uint64_t clock_ = 0;
  absl::flat_hash_map<uint64_t, uint64_t> stamp_;
};

uint64_t Mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

// Hash chain of each leading full page of `prompt`.
std::vector<uint64_t> PageChain(const std::vector<int32_t>& prompt, int page) {
  std::vector<uint64_t> chain;
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (size_t end = page; end <= prompt.size(); end += page) {
    for (size_t i = end - page; i < end; ++i) {
      h = Mix(h ^ static_cast<uint32_t>(prompt[i]));
    }
    chain.push_back(h);
  }
  return chain;
}

// How a replay picks cells: the router, round-robin, or every turn of a
// conversation on one cell (what a client-side session affinity would do:
// the reference the router's prompt-only key is measured against).
enum class Policy { kRouter, kRoundRobin, kConversation };

// Replays the trace under `policy`. Returns the hit rate.
double Replay(const Options& o, Policy policy) {
  std::vector<CellCache> cached(o.cells, CellCache(o.cache_pages));
  std::mt19937 rng(7);  // the same arrival order for both policies
  std::vector<std::string> ids;
  for (int c = 0; c < o.cells; ++c) ids.push_back(absl::StrCat("cell-", c));
  std::vector<CellLoad> loads(o.cells, CellLoad{true, 0, 0, 1 << 20});
  std::vector<std::vector<int32_t>> prompts(o.conversations);
  for (auto& p : prompts) {
    for (int i = 0; i < o.system_tokens; ++i) p.push_back(1000 + i);
  }
  int64_t prompt_tokens = 0, hit_tokens = 0;
  uint64_t turn = 0;
  std::vector<int> order(o.conversations);
  std::iota(order.begin(), order.end(), 0);
  for (int t = 0; t < o.turns; ++t) {
    std::shuffle(order.begin(), order.end(), rng);
    for (int c : order) {
      std::vector<int32_t>& p = prompts[c];
      for (int i = 0; i < o.turn_tokens; ++i) {
        p.push_back(5000 + (c * 7919 + t * 104729 + i * 31) % 40000);
      }
      const int cell =
          policy == Policy::kRoundRobin     ? static_cast<int>(turn % o.cells)
          : policy == Policy::kConversation ? c % o.cells
              : PickCell(loads, ids, PrefixKey(p, o.page), turn).cell;
      ++turn;
      const std::vector<uint64_t> chain = PageChain(p, o.page);
      const size_t usable = (p.size() - 1) / o.page;
      size_t hit = 0;
      while (hit < usable && hit < chain.size() &&
             cached[cell].Contains(chain[hit])) {
        ++hit;
      }
      prompt_tokens += static_cast<int64_t>(p.size());
      hit_tokens += static_cast<int64_t>(hit) * o.page;
      for (uint64_t h : chain) cached[cell].Touch(h);
    }
  }
  return prompt_tokens > 0
             ? static_cast<double>(hit_tokens) / static_cast<double>(prompt_tokens)
             : 0;
}

int Main(int argc, char** argv) {
  Options o;
  bench::BenchFlags(
      "router_replay [--cells N] [--conversations N] [--turns N] "
      "[--system-tokens N] [--turn-tokens N] [--page N] [--cache-pages N]")
      .Int("cells", &o.cells, 1, 1024)
      .Int("conversations", &o.conversations, 1)
      .Int("turns", &o.turns, 1)
      .Int("system-tokens", &o.system_tokens, 0)
      .Int("turn-tokens", &o.turn_tokens, 1)
      .Int("page", &o.page, 1)
      .Int("cache-pages", &o.cache_pages, 1)
      .Parse(argc, argv);
  const double router = Replay(o, Policy::kRouter);
  const double rr = Replay(o, Policy::kRoundRobin);
  const double sticky = Replay(o, Policy::kConversation);
  nlohmann::json out = {{"cells", o.cells},
                        {"conversations", o.conversations},
                        {"turns", o.turns},
                        {"system_tokens", o.system_tokens},
                        {"turn_tokens", o.turn_tokens},
                        {"cache_pages_per_cell", o.cache_pages},
                        {"router_hit_rate", router},
                        {"round_robin_hit_rate", rr},
                        {"conversation_affinity_hit_rate", sticky},
                        {"router_over_round_robin", rr > 0 ? router / rr : 0}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace pdserve::frontend

int main(int argc, char** argv) { return pdserve::frontend::Main(argc, argv); }
