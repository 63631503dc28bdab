// Routing over cells (a cell = one scheduler and its engine). The front end
// knows one or many cells (--scheduler a:50052,b:50052) and picks one per
// request (and per resubmission):
//  1. prefix affinity: requests whose prompts share their leading KV pages
//     (PrefixKey: a hash of the page-aligned prompt prefix) go to the same
//     cell, chosen by rendezvous hashing over the ready cells, so its
//     prefix cache serves them;
//  2. bounded load: that cell is skipped when its waiting queue is longer
//     than the shortest one by more than `spill_waiting`;
//  3. otherwise (no full page of prompt, or spilled) the least loaded cell
//     (waiting, then running), ties taken in turn.
// PickCell is pure; CellRouter adds the channels and a poller that keeps
// every cell's load (SchedulerStatus) fresh.
#ifndef PDSERVE_SERVER_FRONTEND_CELL_ROUTER_H_
#define PDSERVE_SERVER_FRONTEND_CELL_ROUTER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pdserve/v1/scheduler.grpc.pb.h"

namespace pdserve::frontend {

// One cell as the router sees it (from its scheduler's GetStatus).
struct CellLoad {
  bool ready = false;  // the scheduler answers and has a ready engine
  int64_t waiting = 0, running = 0;
  int64_t max_seq_len = 0;
};

// Why a cell was chosen (a metric label and the debug log).
enum class RouteReason { kPrefix, kSpilled, kLeastLoaded, kNoneReady };
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

// The cells of one front end. Thread-safe; the poller thread runs from
// Start() to the destructor.
class CellRouter {
 public:
  // `targets`: host:port of each cell's scheduler (at least one, no
  // duplicates; INVALID_ARGUMENT otherwise).
  static absl::StatusOr<std::unique_ptr<CellRouter>> Create(
      std::vector<std::string> targets);
  ~CellRouter();

  // Polls every cell's status each `interval_ms`.
  void Start(int interval_ms = 100);

  struct Route {
    v1::Scheduler::Stub* stub = nullptr;  // never null (cell 0 when none ready)
    int cell = 0;
    RouteReason reason = RouteReason::kNoneReady;
  };
  // The cell for a prompt. With no cell ready it returns cell 0 (whose
  // scheduler then answers UNAVAILABLE or waits, as a single cell does).
  Route Pick(absl::Span<const int32_t> prompt);

  int size() const { return static_cast<int>(targets_.size()); }
  const std::string& target(int cell) const { return targets_[cell]; }
  v1::Scheduler::Stub* stub(int cell) const { return stubs_[cell].get(); }
  // Latest loads (as of the last poll, or SetLoads).
  std::vector<CellLoad> Loads() const;
  // Replaces the loads (tests; the poller overwrites them when running).
  void SetLoads(std::vector<CellLoad> loads);
  // Requests routed to each cell so far.
  std::vector<int64_t> RoutedCounts() const;

 private:
  explicit CellRouter(std::vector<std::string> targets);
  void Poll();

  std::vector<std::string> targets_;
  std::vector<std::unique_ptr<v1::Scheduler::Stub>> stubs_;
  mutable std::mutex mu_;
  std::vector<CellLoad> loads_;    // guarded by mu_
  std::vector<int64_t> routed_;    // guarded by mu_
  std::atomic<uint64_t> turn_{0};
  std::atomic<bool> stop_{false};
  int interval_ms_ = 100;
  std::thread poller_;
};

// Splits "a:1,b:2" into addresses (whitespace trimmed, empties dropped).
std::vector<std::string> SplitTargets(const std::string& list);

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_CELL_ROUTER_H_
