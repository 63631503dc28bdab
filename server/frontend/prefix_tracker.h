// What a front end has sent where, as an approximation of each cell's
// prefix cache: per cell, the page-chain hashes of the prompts routed there
// (one hash per leading whole page, each chained on the one before, as the
// KV ledger indexes prefixes), bounded, least recently routed dropped
// first. It lets the router send a request to the cell holding the longest
// run of its leading pages (the next turn of a conversation goes where the
// last one went) rather than where a hash of its first pages points. It is
// an estimate: a cell may have evicted sooner, or hold pages another front
// end sent. Pure (no IO, no clock); not thread-safe (CellRouter holds it
// under its lock).
#ifndef PDSERVE_SERVER_FRONTEND_PREFIX_TRACKER_H_
#define PDSERVE_SERVER_FRONTEND_PREFIX_TRACKER_H_

#include <cstdint>
#include <list>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace pdserve::frontend {

// SplitMix64's finaliser: a well-mixed 64-bit hash step (pure).
uint64_t SplitMix64(uint64_t x);

// The chained hash of each leading whole page of `prompt`.
std::vector<uint64_t> PageChain(absl::Span<const int32_t> prompt,
                                int64_t page_tokens = 16);

class PrefixTracker {
 public:
  // At most `pages_per_cell` page hashes remembered per cell.
  explicit PrefixTracker(size_t pages_per_cell = 1 << 16)
      : capacity_(pages_per_cell) {}

  // How many leading pages of `chain` cell `cell` is believed to hold.
  int64_t Matched(const std::string& cell,
                  absl::Span<const uint64_t> chain) const;
  // `chain` was routed to `cell`: its pages are the most recent there.
  void Record(const std::string& cell, absl::Span<const uint64_t> chain);
  // The cell left: forget it.
  void Forget(const std::string& cell) { cells_.erase(cell); }

 private:
  struct Cell {
    std::list<uint64_t> order;  // most recent first
    absl::flat_hash_map<uint64_t, std::list<uint64_t>::iterator> where;
  };
  size_t capacity_;
  absl::flat_hash_map<std::string, Cell> cells_;
};

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_PREFIX_TRACKER_H_
