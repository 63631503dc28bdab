#include "server/frontend/cell_routing.h"

#include <algorithm>
#include <vector>

namespace pdserve::frontend {
namespace {

uint64_t HashString(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, then mixed
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return SplitMix64(h);
}

bool LessLoaded(const CellLoad& a, const CellLoad& b) {
  if (a.waiting != b.waiting) return a.waiting < b.waiting;
  if (a.running != b.running) return a.running < b.running;
  return a.free_kv_pages > b.free_kv_pages;
}

}  // namespace

const char* RouteReasonName(RouteReason reason) {
  switch (reason) {
    case RouteReason::kPrefix: return "prefix";
    case RouteReason::kSpilled: return "spilled";
    case RouteReason::kLeastLoaded: return "least_loaded";
    case RouteReason::kNoneReady: return "none_ready";
    case RouteReason::kCached: return "cached";
  }
  return "unknown";
}

std::optional<uint64_t> PrefixKey(absl::Span<const int32_t> prompt,
                                  int64_t page_tokens, int64_t max_tokens) {
  if (page_tokens <= 0) return std::nullopt;
  const int64_t n =
      std::min<int64_t>(static_cast<int64_t>(prompt.size()), max_tokens) /
      page_tokens * page_tokens;
  if (n == 0) return std::nullopt;
  uint64_t h = SplitMix64(static_cast<uint64_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    h = SplitMix64(h ^ static_cast<uint32_t>(prompt[i]));
  }
  return h;
}

RouteDecision PickCell(absl::Span<const CellLoad> cells,
                       absl::Span<const std::string> cell_ids,
                       std::optional<uint64_t> key, uint64_t turn,
                       int64_t spill_waiting) {
  RouteDecision d;
  int least = -1;
  int64_t ties = 0;
  for (int i = 0; i < static_cast<int>(cells.size()); ++i) {
    if (!cells[i].ready) continue;
    if (least < 0 || LessLoaded(cells[i], cells[least])) {
      least = i;
      ties = 1;
    } else if (!LessLoaded(cells[least], cells[i])) {
      ++ties;
    }
  }
  if (least < 0) return d;
  if (key.has_value()) {
    int best = -1;
    uint64_t best_score = 0;
    for (int i = 0; i < static_cast<int>(cells.size()); ++i) {
      if (!cells[i].ready) continue;
      const uint64_t score = SplitMix64(*key ^ HashString(cell_ids[i]));
      if (best < 0 || score > best_score) {
        best = i;
        best_score = score;
      }
    }
    if (cells[best].waiting <= cells[least].waiting + spill_waiting) {
      return {best, RouteReason::kPrefix};
    }
    d.reason = RouteReason::kSpilled;
  } else {
    d.reason = RouteReason::kLeastLoaded;
  }
  // The (turn % ties)-th of the equally least loaded cells.
  int64_t skip = static_cast<int64_t>(turn % static_cast<uint64_t>(ties));
  for (int i = 0; i < static_cast<int>(cells.size()); ++i) {
    if (!cells[i].ready || LessLoaded(cells[least], cells[i])) continue;
    if (skip-- == 0) {
      d.cell = i;
      break;
    }
  }
  return d;
}

CellRole ParseCellRole(const std::string& role) {
  if (role == "prefill") return CellRole::kPrefill;
  if (role == "decode") return CellRole::kDecode;
  return CellRole::kBoth;
}

namespace {

// The cells `phase` may use, as the only ready ones (every cell for a
// kServe pick when none of its own is ready).
std::vector<CellLoad> EligibleLoads(absl::Span<const CellLoad> cells,
                                    CellPhase phase) {
  std::vector<CellLoad> eligible(cells.begin(), cells.end());
  bool any = false;
  for (CellLoad& load : eligible) {
    const bool prefill_cell = load.role == CellRole::kPrefill;
    load.ready = load.ready && (phase == CellPhase::kPrefill) == prefill_cell;
    any = any || load.ready;
  }
  if (!any && phase == CellPhase::kServe) {
    eligible.assign(cells.begin(), cells.end());
  }
  return eligible;
}

}  // namespace

RouteDecision PickForPhase(absl::Span<const CellLoad> cells,
                           absl::Span<const std::string> cell_ids,
                           absl::Span<const int32_t> prompt, CellPhase phase,
                           uint64_t turn) {
  return PickCell(EligibleLoads(cells, phase), cell_ids, PrefixKey(prompt),
                  turn);
}

RouteDecision RouteByCache(absl::Span<const CellLoad> cells,
                           absl::Span<const std::string> cell_ids,
                           absl::Span<const int32_t> prompt, CellPhase phase,
                           uint64_t turn, PrefixTracker* tracker,
                           double min_match, int64_t spill_waiting) {
  if (tracker == nullptr) {
    return PickForPhase(cells, cell_ids, prompt, phase, turn);
  }
  const std::vector<CellLoad> eligible = EligibleLoads(cells, phase);
  const std::vector<uint64_t> chain = PageChain(prompt);
  int best = -1, least = -1;
  int64_t best_pages = 0;
  for (int i = 0; i < static_cast<int>(eligible.size()); ++i) {
    if (!eligible[i].ready) continue;
    if (least < 0 || LessLoaded(eligible[i], eligible[least])) least = i;
    const int64_t pages = tracker->Matched(cell_ids[i], chain);
    if (pages > best_pages ||
        (pages == best_pages && best >= 0 &&
         LessLoaded(eligible[i], eligible[best]))) {
      best = i;
      best_pages = pages;
    }
  }
  RouteDecision d;
  if (best >= 0 && best_pages > 0 &&
      static_cast<double>(best_pages) >=
          min_match * static_cast<double>(chain.size()) &&
      eligible[best].waiting <= eligible[least].waiting + spill_waiting) {
    d = {best, RouteReason::kCached};
  } else {
    d = PickCell(eligible, cell_ids, PrefixKey(prompt), turn, spill_waiting);
  }
  if (d.cell >= 0) tracker->Record(cell_ids[d.cell], chain);
  return d;
}

bool CountsAsWaiting(RouteReason reason) {
  return reason == RouteReason::kSpilled ||
         reason == RouteReason::kLeastLoaded;
}

bool CanSplitAcross(absl::Span<const CellLoad> cells) {
  bool prefill = false, decode = false;
  for (const CellLoad& load : cells) {
    if (!load.ready) continue;
    (load.role == CellRole::kPrefill ? prefill : decode) = true;
  }
  return prefill && decode;
}

}  // namespace pdserve::frontend
