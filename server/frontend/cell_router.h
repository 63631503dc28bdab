// Routing over cells (a cell = one scheduler and its engine). The front end
// knows one or many cells (--scheduler a:50052,b:50052, or
// dns:///cells.ns.svc:50052 for every address a name resolves to, re-resolved
// while running) and picks one per request (and per resubmission):
//  1. prefix affinity: requests whose prompts share their leading KV pages
//     (PrefixKey: a hash of the page-aligned prompt prefix) go to the same
//     cell, chosen by rendezvous hashing over the ready cells, so its
//     prefix cache serves them;
//  2. bounded load: that cell is skipped when its waiting queue is longer
//     than the shortest one by more than `spill_waiting`;
//  3. otherwise (no full page of prompt, or spilled) the least loaded cell
//     (waiting, then running, then most free KV pages), ties taken in turn.
// The pure part (PickCell, PickForPhase) is in cell_routing.h; CellRouter
// adds the channels and keeps every cell's load fresh: once started, each
// scheduler streams it (Scheduler.WatchStatus, one CellLoadWatcher per
// cell); a scheduler without the stream is polled.
#ifndef PDSERVE_SERVER_FRONTEND_CELL_ROUTER_H_
#define PDSERVE_SERVER_FRONTEND_CELL_ROUTER_H_

#include <atomic>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/frontend/cell_load_watcher.h"
#include "server/frontend/cell_routing.h"
#include "pdserve/v1/scheduler.grpc.pb.h"

namespace pdserve::frontend {

// Where cells come from. "host:port" is one cell. "dns:///name:port" is
// every address `name` resolves to, re-resolved while the front end runs
// (a Kubernetes headless Service lists one address per ready pod).
struct CellSource {
  std::string text;  // as given
  bool dns = false;
  std::string host, port;  // dns only
};
// Parses one source; INVALID_ARGUMENT naming it when a dns source has no
// name or no numeric port.
absl::StatusOr<CellSource> ParseCellSource(const std::string& text);

// Resolves `host` to "ip:port" targets ("[ip6]:port" for IPv6), sorted and
// without duplicates; UNAVAILABLE with the resolver's message when it fails.
using AddressResolver = std::function<absl::StatusOr<std::vector<std::string>>(
    const std::string& host, const std::string& port)>;
absl::StatusOr<std::vector<std::string>> ResolveAddresses(
    const std::string& host, const std::string& port);

// The cells of one front end. Thread-safe; the poller thread runs from
// Start() to the destructor. A cell whose address a dns source no longer
// lists leaves the routing at once; calls already on it keep its stub
// (Route.stub is shared) and, if its scheduler then goes, are resubmitted to
// another cell like any call whose scheduler was lost.
class CellRouter {
 public:
  struct Options {
    // Once started: each cell's loads stream (watch_loads), throttled to
    // one status per poll_interval_ms / 4, with a heartbeat every second;
    // without watch_loads (or against an older scheduler) GetStatus every
    // poll_interval_ms.
    int poll_interval_ms = 100;
    bool watch_loads = true;
    int resolve_interval_ms = 5000;  // dns sources
    AddressResolver resolver;        // ResolveAddresses when empty
    // Called (no lock held; from Poll or a cell's watcher thread) with the
    // target of a cell whose scheduler answers but whose engine was lost,
    // when another cell is ready (the front end moves that cell's streams
    // there rather than wait for the engine). May be empty.
    std::function<void(const std::string& target)> on_engine_lost;
    // Route first to the cell believed to hold most of a prompt's leading
    // pages (RouteByCache with a PrefixTracker of what was sent where).
    bool track_prefixes = true;
  };
  // `sources`: at least one, no duplicates (INVALID_ARGUMENT otherwise).
  // Dns sources are resolved once here; one that resolves to nothing yet
  // is not an error (its cells appear when they do).
  static absl::StatusOr<std::unique_ptr<CellRouter>> Create(
      std::vector<std::string> sources, Options options);
  static absl::StatusOr<std::unique_ptr<CellRouter>> Create(
      std::vector<std::string> sources) {
    return Create(std::move(sources), Options());
  }
  ~CellRouter();

  // Starts the loads' watchers (or the poller: loads every
  // poll_interval_ms) and re-resolves dns every resolve_interval_ms.
  void Start();
  // Polls every cell's status now (the poller's step).
  void Poll();
  // Re-resolves the dns sources now (the poller's other step).
  void Resolve();
  // Polls until every cell (`all`) or at least one is ready, at most
  // `seconds`; whether it happened.
  bool WaitUntilReady(bool all, int seconds);

  struct Route {
    // Null only when no cell is known at all (dns resolved nothing).
    std::shared_ptr<v1::Scheduler::Stub> stub;
    std::string target;
    RouteReason reason = RouteReason::kNoneReady;
  };
  // The cell for a prompt. With no cell ready it returns the first cell
  // (whose scheduler then answers UNAVAILABLE or waits, as a single cell
  // does).
  Route Pick(absl::Span<const int32_t> prompt,
             CellPhase phase = CellPhase::kServe);
  // Whether a request can be split now: a prefill cell and a cell that
  // decodes are both ready.
  bool CanSplit() const;

  // The cells now, in the order they were found, with their latest loads
  // (as of the last poll, or SetLoads) and the requests routed to each.
  std::vector<std::string> Targets() const;
  std::vector<CellLoad> Loads() const;
  std::vector<int64_t> RoutedCounts() const;
  // Replaces the loads, in Targets() order (tests; the poller overwrites
  // them when running).
  void SetLoads(std::vector<CellLoad> loads);
  // The smallest capacity (max_seq_len) of the ready cells: a request must
  // fit wherever it is routed. 0 when no cell is ready.
  int64_t ReadyCapacity() const;
  // Whether a source is dns:/// (its cells may come and go).
  bool has_dns_source() const;
  // Statuses streamed by the cells' watchers so far (0 when polling).
  int64_t StreamedStatuses() const;

 private:
  CellRouter(std::vector<CellSource> sources, Options options);
  // Makes the cells exactly `targets` (keeping those already known);
  // `log`: say on stderr which joined and which left.
  void SetTargetsLocked(const std::vector<std::string>& targets, bool log)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A cell's status (answered false: it did not answer), from a poll or
  // its watcher; reports a lost engine through on_engine_lost.
  void ApplyStatus(const std::string& target, bool answered,
                   const v1::SchedulerStatus& status);
  void StartWatcherLocked(size_t cell) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Destroys the watchers of cells that left (outside the lock: each joins
  // a thread that may be waiting for it) and restarts stale streams.
  void TendWatchers();

  const std::vector<CellSource> sources_;
  const Options options_;
  mutable std::mutex mu_;
  // The cells, in the order found: index i of each vector is one cell
  // (kept as parallel vectors so that Pick hands them to PickCell as is).
  std::vector<std::string> targets_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<v1::Scheduler::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
  std::vector<CellLoad> loads_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> routed_ ABSL_GUARDED_BY(mu_);
  // One per cell once started (watch_loads), in the order of targets_.
  std::vector<std::unique_ptr<CellLoadWatcher>> watchers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<CellLoadWatcher>> retired_ ABSL_GUARDED_BY(mu_);
  bool watching_ ABSL_GUARDED_BY(mu_) = false;
  PrefixTracker prefixes_ ABSL_GUARDED_BY(mu_);
  // Last good resolution of each source (a failed one keeps the previous).
  std::vector<std::vector<std::string>> resolved_ ABSL_GUARDED_BY(mu_);
  bool resolved_once_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> turn_{0};
  std::atomic<bool> stop_{false};
  std::thread poller_;
};

// Splits "a:1,b:2" into addresses (whitespace trimmed, empties dropped).
std::vector<std::string> SplitTargets(const std::string& list);

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_CELL_ROUTER_H_
