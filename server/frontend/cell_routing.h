// The pure part of routing over cells: which cell a request goes to, from
// the cells' loads and roles and the prompt's leading pages. No IO, no
// clock, no threads: the front end's CellRouter and the cluster simulator
// (`pdserve simulate --cells N`) call the same functions.
//  1. prefix affinity: requests whose prompts share their leading KV pages
//     (PrefixKey: a hash of the page-aligned prompt prefix) go to the same
//     cell, chosen by rendezvous hashing over the ready cells, so its
//     prefix cache serves them;
//  2. bounded load: that cell is skipped when its waiting queue is longer
//     than the shortest one by more than `spill_waiting`;
//  3. otherwise (no full page of prompt, or spilled) the least loaded cell
//     (waiting, then running, then most free KV pages), ties taken in turn.
#ifndef PDSERVE_SERVER_FRONTEND_CELL_ROUTING_H_
#define PDSERVE_SERVER_FRONTEND_CELL_ROUTING_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/types/span.h"
#include "server/frontend/prefix_tracker.h"

namespace pdserve::frontend {

// A cell's part in prefill/decode disaggregation (its scheduler's --role).
enum class CellRole { kBoth, kPrefill, kDecode };
// "prefill" / "decode"; anything else (an older scheduler: "") is kBoth.
CellRole ParseCellRole(const std::string& role);

// One cell as the router sees it (from its scheduler's GetStatus).
struct CellLoad {
  bool ready = false;  // the scheduler answers and has a ready engine
  int64_t waiting = 0, running = 0;
  int64_t max_seq_len = 0;
  CellRole role = CellRole::kBoth;
  // Its KV pool (pages; 0 when unknown): free ones break ties between
  // cells with equal queues. Step time (ms) is informational.
  int64_t total_kv_pages = 0, free_kv_pages = 0, cached_kv_pages = 0;
  double step_ms = 0;
};

// Which cells a pick may choose: kServe, a whole request or its decode
// (cells of role both or decode; every cell when none of those is ready);
// kPrefill, the prompt of a split request (prefill cells only).
enum class CellPhase { kServe, kPrefill };

// Why a cell was chosen (a metric label and the debug log): kCached, the
// cell believed to hold most of the prompt's leading pages (PrefixTracker);
// kPrefix, the rendezvous cell of its routing key.
enum class RouteReason { kPrefix, kSpilled, kLeastLoaded, kNoneReady, kCached };
const char* RouteReasonName(RouteReason reason);

struct RouteDecision {
  int cell = -1;  // index into the cells; -1 when none is ready
  RouteReason reason = RouteReason::kNoneReady;
};

// The routing key of a prompt: a hash of its first whole pages (at most
// `max_tokens` tokens, rounded down to `page_tokens`); nullopt when the
// prompt has no whole page. Pure.
std::optional<uint64_t> PrefixKey(absl::Span<const int32_t> prompt,
                                  int64_t page_tokens = 16,
                                  int64_t max_tokens = 1024);

// Picks a cell for a request with routing key `key` (see the header
// comment). `cell_ids` name the cells (their addresses) for the rendezvous
// hash; `turn` breaks ties among equally loaded cells. Pure.
RouteDecision PickCell(absl::Span<const CellLoad> cells,
                       absl::Span<const std::string> cell_ids,
                       std::optional<uint64_t> key, uint64_t turn,
                       int64_t spill_waiting = 8);

// PickCell over the cells `phase` may use (see CellPhase): with no ready
// cell of role both/decode, a kServe pick takes any ready cell. Pure.
RouteDecision PickForPhase(absl::Span<const CellLoad> cells,
                           absl::Span<const std::string> cell_ids,
                           absl::Span<const int32_t> prompt, CellPhase phase,
                           uint64_t turn);

// PickForPhase, first by `tracker` (null: PickForPhase alone): among the
// cells the phase may use, the ready one believed to hold the longest run
// of the prompt's leading pages wins (ties: the least loaded), when that
// run covers at least `min_match` of the prompt's pages and the cell is at
// most `spill_waiting` requests behind the shortest queue (kCached).
// Otherwise PickForPhase's rule. The chosen cell's pages are recorded in
// the tracker. Pure but for the tracker it updates.
RouteDecision RouteByCache(absl::Span<const CellLoad> cells,
                           absl::Span<const std::string> cell_ids,
                           absl::Span<const int32_t> prompt, CellPhase phase,
                           uint64_t turn, PrefixTracker* tracker,
                           double min_match = 0.5, int64_t spill_waiting = 8);

// Whether a pick counts as a new waiting request on its cell until the
// next load refresh (spreading a burst): not for prefix or cache affinity,
// which must not push their own followers off the cell.
bool CountsAsWaiting(RouteReason reason);

// Whether a request can be split: a ready prefill cell and a ready cell that
// decodes (role both or decode). Pure.
bool CanSplitAcross(absl::Span<const CellLoad> cells);

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_CELL_ROUTING_H_
