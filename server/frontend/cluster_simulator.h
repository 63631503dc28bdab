// Trace-driven simulation of a cluster of cells behind one front end, for
// sizing a deployment before buying it (`pdserve simulate --cells N
// [--prefill-cells P]`). Each simulated cell runs the scheduler's own Policy
// (with its prefix cache) and the adaptive step budget against a linear step
// cost model; requests are routed by the front end's own pure routing
// (RouteByCache: cached-prefix and prefix affinity, bounded load, least
// loaded) over loads
// refreshed at the front end's poll interval; prompts of at least
// pd_min_prompt_tokens are split (prefill cell, KV hand-off, decode cell)
// whenever a prefill cell exists, as GenerationStream does. Pure: no IO, no
// clock (time is simulated), deterministic.
#ifndef PDSERVE_SERVER_FRONTEND_CLUSTER_SIMULATOR_H_
#define PDSERVE_SERVER_FRONTEND_CLUSTER_SIMULATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "scheduler/policy.h"
#include "scheduler/simulator.h"

namespace pdserve::frontend {

// How the simulated front end picks cells: kRouter, as the live one does
// (RouteByCache: the cell believed to hold most of the prompt, then the
// rendezvous key, bounded load, least loaded); kRendezvous, without the
// prefix tracker (PickForPhase); kRoundRobin, each request to the next
// eligible cell (the reference the router is compared with).
enum class SimRouting { kRouter, kRendezvous, kRoundRobin };

// A latency objective per request: time to first token and the mean gap
// between its tokens, in ms (0 = not constrained).
struct LatencySlo {
  double ttft_ms = 0;
  double itl_ms = 0;
};

// The cluster: `cells` identical cells, the first `prefill_cells` of them
// with role prefill (0 = every cell both; else < cells), each cell's
// scheduler configured by `policy`/`pool`/`itl_slowdown` and its engine
// costed by `cost`.
struct ClusterConfig {
  int cells = 1;
  int prefill_cells = 0;
  scheduler::PolicyConfig policy;
  scheduler::PoolGeometry pool;
  scheduler::StepCostModel cost;
  double itl_slowdown = 0;  // > 1: the adaptive budget, as --itl-slowdown
  double itl_floor_ms = 40;  // with it: as --itl-floor-ms
  // true: each cell budgets as the live scheduler does (OnlineStepBudget:
  // fitted online to its own simulated steps, a cold-start cap until the
  // first fit); false: the budget uses `cost` from the first step.
  bool online_fit = true;
  int64_t pd_min_prompt_tokens = 256;  // --pd-min-prompt-tokens
  // A hand-off's transfer (export, stream, import) in ms: fixed + per
  // prompt token.
  double handoff_fixed_ms = 2.0;
  double handoff_ms_per_token = 0.01;
  double poll_interval_ms = 100;  // the front end's load refresh
  SimRouting routing = SimRouting::kRouter;
  LatencySlo slo;
  // Keep every token's time per request (ClusterResult::token_ms).
  bool record_token_times = false;
  // Step-time jitter: when not empty, each simulated step's time is the
  // cost model's scaled by a ratio of its kind (StepTimeSpread::For:
  // decode-only, mixed or prefill-only), drawn uniformly by a
  // generator seeded with `noise_seed` (deterministic). From measured
  // steps: scheduler::StepTimeRatios.
  scheduler::StepTimeSpread step_time_ratios;
  uint64_t noise_seed = 1;
  // The cells' names for the router's rendezvous hash (a live front end
  // uses their addresses); empty: "cell-0", "cell-1", ...
  std::vector<std::string> cell_ids;
};

// INVALID_ARGUMENT naming the value when `config` cannot be simulated.
absl::Status CheckClusterConfig(const ClusterConfig& config);

// One cell's share of a run.
struct SimCellStats {
  bool prefill_role = false;
  int64_t routed = 0;  // requests (or their prefill / decode parts) sent here
  int64_t steps = 0;
  double mean_batch = 0;
  double busy_fraction = 0;  // time stepping / run duration
};

struct ClusterResult {
  scheduler::Percentiles ttft_ms;  // arrival -> first token
  scheduler::Percentiles itl_ms;   // gaps between a request's tokens
  double duration_s = 0;           // first arrival -> last token
  double output_tokens_per_s = 0;
  int64_t completed = 0;
  int64_t rejected = 0;  // refused by a cell's policy (queue full, too big)
  int64_t preemptions = 0;
  int64_t handoffs = 0;  // split requests handed to a decode cell
  // Prompt tokens served from a cell's prefix cache / all prompt tokens
  // (hand-off imports not counted).
  double prefix_hit_rate = 0;
  // Completed requests meeting `slo` (fraction; per second of the run).
  double slo_attainment = 0;
  double goodput_rps = 0;
  std::vector<SimCellStats> cells;
  // With record_token_times: per request of the trace, in the trace's
  // order, the time of each of its tokens in ms from the trace start.
  std::vector<std::vector<double>> token_ms;
};

// Replays `trace` (any order; sorted by arrival) through the cluster. A
// request's prompt is synthesised: its first prefix_tokens tokens are those
// of its prefix_group (shared by every request of the group), the rest its
// own, so prefix routing and the cells' prefix caches see real sharing.
// `prompts`, when not empty, gives each request's prompt ids instead (one
// per trace entry, prompt_tokens each: replaying a recorded run).
// `config` must pass CheckClusterConfig.
ClusterResult SimulateCluster(
    absl::Span<const scheduler::TraceRequest> trace,
    const ClusterConfig& config,
    absl::Span<const std::vector<int32_t>> prompts = {});

// A row of the sizing table: the result with `cells` cells, `prefill_cells`
// of them prefill.
struct SizingRow {
  int cells = 0;
  int prefill_cells = 0;
  ClusterResult result;
};

// SimulateCluster over 1, 2, 4, ... up to `max_cells` (and max_cells
// itself), keeping the prefill share of `config` (at least one prefill and
// one decode cell from 2 cells on when it has prefill cells; none with 1).
std::vector<SizingRow> SizeCluster(
    absl::Span<const scheduler::TraceRequest> trace,
    const ClusterConfig& config, int max_cells);

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_CLUSTER_SIMULATOR_H_
