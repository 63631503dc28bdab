#include "server/frontend/cluster_simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/frontend/cell_routing.h"

namespace pdserve::frontend {
namespace {

using scheduler::Policy;
using scheduler::RequestSpec;
using scheduler::StepPlan;
using scheduler::TraceRequest;

constexpr double kNever = std::numeric_limits<double>::infinity();

// Sequence ids: a request's whole run (or its prefill part) is 2*i, its
// decode part on a decode cell 2*i+1.
uint64_t WholeId(size_t request) { return 2 * request; }
uint64_t DecodeId(size_t request) { return 2 * request + 1; }
size_t RequestOf(uint64_t id) { return static_cast<size_t>(id / 2); }

int32_t Token(uint64_t stream, int64_t i) {
  uint64_t x = stream * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i);
  x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ull;
  return static_cast<int32_t>(100 + (x ^ (x >> 29)) % 100000);
}

// The synthesised prompt of request `index` (see SimulateCluster).
std::vector<int32_t> PromptOf(const TraceRequest& r, size_t index) {
  std::vector<int32_t> p;
  p.reserve(r.prompt_tokens + 1);
  const int64_t shared = r.prefix_group > 0 ? r.prefix_tokens : 0;
  for (int64_t i = 0; i < r.prompt_tokens; ++i) {
    p.push_back(i < shared ? Token(static_cast<uint64_t>(r.prefix_group), i)
                           : Token((1ull << 40) + index, i));
  }
  return p;
}

// One simulated cell: a scheduler's policy and its engine's step timing.
struct Cell {
  Cell(const ClusterConfig& c, bool prefill)
      : policy(c.policy, c.pool), prefill_role(prefill) {}
  Policy policy;
  scheduler::OnlineStepCost online;
  bool prefill_role;
  std::vector<RequestSpec> inbox;  // submitted at the next step boundary
  bool busy = false;
  double busy_until = kNever;
  double busy_ms = 0;
  StepPlan plan;
  int64_t steps = 0, batch_sum = 0, routed = 0;
};

// Per request: what the clients would see.
struct Progress {
  double arrival_ms = 0;
  double first_ms = -1, last_ms = -1;
  int64_t tokens = 0;
  int64_t cached = 0;
  bool rejected = false;
  std::vector<double> token_ms;  // with record_token_times
};

struct Handoff {
  double at_ms;
  size_t request;
  int cell;
  bool operator>(const Handoff& o) const { return at_ms > o.at_ms; }
};

class ClusterRun {
 public:
  ClusterRun(absl::Span<const TraceRequest> trace, const ClusterConfig& c,
             absl::Span<const std::vector<int32_t>> prompts)
      : config_(c), given_prompts_(prompts), noise_(c.noise_seed) {
    order_.resize(trace.size());
    for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
    std::stable_sort(order_.begin(), order_.end(), [&](size_t a, size_t b) {
      return trace[a].arrival_s < trace[b].arrival_s;
    });
    for (size_t i : order_) reqs_.push_back(trace[i]);
    for (int i = 0; i < c.cells; ++i) {
      cells_.push_back(std::make_unique<Cell>(c, i < c.prefill_cells));
      ids_.push_back(static_cast<size_t>(i) < c.cell_ids.size()
                         ? c.cell_ids[i]
                         : absl::StrCat("cell-", i));
    }
    progress_.resize(reqs_.size());
    RefreshLoads();
  }

  ClusterResult Run();

 private:
  double NextEventMs() const;
  void RefreshLoads();
  int Route(const std::vector<int32_t>& prompt, CellPhase phase);
  void Arrive(size_t index);
  void Deliver(const Handoff& h);
  void FinishStep(Cell& cell);
  void StartStep(Cell& cell);
  void Emit(size_t request, bool decode_part);
  ClusterResult Summarise() const;

  std::vector<int32_t> Prompt(size_t request) const {
    return given_prompts_.empty() ? PromptOf(reqs_[request], request)
                                  : given_prompts_[order_[request]];
  }

  const ClusterConfig& config_;
  absl::Span<const std::vector<int32_t>> given_prompts_;
  std::vector<TraceRequest> reqs_;  // by arrival
  std::vector<size_t> order_;       // reqs_[i] is trace[order_[i]]
  std::vector<std::unique_ptr<Cell>> cells_;
  std::vector<std::string> ids_;
  std::vector<CellLoad> loads_;  // as of the last poll, plus picks since
  double next_poll_ms_ = 0;
  uint64_t turn_ = 0;
  double now_ms_ = 0;
  size_t next_ = 0;
  std::priority_queue<Handoff, std::vector<Handoff>, std::greater<>> handoffs_;
  std::vector<Progress> progress_;
  std::vector<double> itl_;
  int64_t handed_off_ = 0;
  std::mt19937_64 noise_;
  PrefixTracker prefixes_;  // the simulated front end's (kRouter)
};

void ClusterRun::RefreshLoads() {
  loads_.clear();
  for (const auto& c : cells_) {
    loads_.push_back(
        {true, c->policy.waiting() + static_cast<int64_t>(c->inbox.size()),
         c->policy.running(), config_.pool.max_seq_len,
         c->prefill_role ? CellRole::kPrefill : CellRole::kBoth});
  }
  next_poll_ms_ = now_ms_ + config_.poll_interval_ms;
}

int ClusterRun::Route(const std::vector<int32_t>& prompt, CellPhase phase) {
  if (now_ms_ >= next_poll_ms_) RefreshLoads();
  const uint64_t turn = turn_++;
  int cell;
  if (config_.routing == SimRouting::kRoundRobin) {
    std::vector<int> eligible;
    for (int i = 0; i < static_cast<int>(cells_.size()); ++i) {
      if ((phase == CellPhase::kPrefill) == cells_[i]->prefill_role) {
        eligible.push_back(i);
      }
    }
    cell = eligible[turn % eligible.size()];
  } else {
    const RouteDecision d = RouteByCache(
        loads_, ids_, prompt, phase, turn,
        config_.routing == SimRouting::kRouter ? &prefixes_ : nullptr);
    cell = d.cell;
    // As CellRouter::Pick: a routed request counts as waiting there until
    // the next poll, so a burst spreads.
    if (CountsAsWaiting(d.reason)) ++loads_[cell].waiting;
  }
  ++cells_[cell]->routed;
  return cell;
}

void ClusterRun::Arrive(size_t index) {
  const TraceRequest& r = reqs_[index];
  progress_[index].arrival_ms = r.arrival_s * 1000.0;
  std::vector<int32_t> prompt = Prompt(index);
  const bool split = config_.prefill_cells > 0 &&
                     r.prompt_tokens >= config_.pd_min_prompt_tokens;
  const int cell =
      Route(prompt, split ? CellPhase::kPrefill : CellPhase::kServe);
  RequestSpec spec{WholeId(index), r.priority, r.prompt_tokens,
                   split ? 1 : r.output_tokens, std::move(prompt)};
  cells_[cell]->inbox.push_back(std::move(spec));
}

// A finished prefill's KV reaches its decode cell: the request continues
// there with its first token appended and the prompt's KV imported.
void ClusterRun::Deliver(const Handoff& h) {
  const TraceRequest& r = reqs_[h.request];
  std::vector<int32_t> prompt = Prompt(h.request);
  prompt.push_back(Token(2, static_cast<int64_t>(h.request)));
  RequestSpec spec{DecodeId(h.request), r.priority, r.prompt_tokens + 1,
                   r.output_tokens - 1, std::move(prompt)};
  spec.imported_tokens = r.prompt_tokens;
  cells_[h.cell]->inbox.push_back(std::move(spec));
}

void ClusterRun::Emit(size_t request, bool decode_part) {
  Progress& p = progress_[request];
  if (p.first_ms < 0) {
    p.first_ms = now_ms_;
  } else {
    itl_.push_back(now_ms_ - p.last_ms);
  }
  p.last_ms = now_ms_;
  ++p.tokens;
  if (config_.record_token_times) p.token_ms.push_back(now_ms_);
  const TraceRequest& r = reqs_[request];
  const bool split_prefill = !decode_part && config_.prefill_cells > 0 &&
                             r.prompt_tokens >= config_.pd_min_prompt_tokens;
  if (split_prefill && r.output_tokens > 1) {
    const int cell = Route(Prompt(request), CellPhase::kServe);
    handoffs_.push({now_ms_ + config_.handoff_fixed_ms +
                        config_.handoff_ms_per_token *
                            static_cast<double>(r.prompt_tokens),
                    request, cell});
    ++handed_off_;
  }
}

void ClusterRun::FinishStep(Cell& cell) {
  for (const scheduler::PlanItem& item : cell.plan.items) {
    const bool decode_part = item.id % 2 == 1;
    if (!decode_part) progress_[RequestOf(item.id)].cached += item.cached_tokens;
    if (item.prefill && !item.completes_prompt) continue;
    Emit(RequestOf(item.id), decode_part);
  }
  cell.policy.Commit({});  // the policy ends each request at its length
  cell.busy = false;
  cell.busy_until = kNever;
}

void ClusterRun::StartStep(Cell& cell) {
  for (RequestSpec& spec : cell.inbox) {
    if (!cell.policy.Submit(spec).ok()) {
      progress_[RequestOf(spec.id)].rejected = true;
    }
  }
  cell.inbox.clear();
  if (config_.itl_slowdown > 1) {
    const int64_t max_budget = config_.policy.step_token_budget;
    cell.policy.set_step_token_budget(
        config_.online_fit
            ? scheduler::OnlineStepBudget(cell.policy, cell.online,
                                          config_.itl_slowdown, 1, max_budget,
                                          config_.itl_floor_ms)
            : scheduler::AdaptiveStepBudgetFor(cell.policy, config_.cost,
                                               config_.itl_slowdown, 1,
                                               max_budget,
                                               config_.itl_floor_ms));
  }
  cell.plan = cell.policy.Plan();
  if (cell.plan.items.empty()) {
    cell.policy.Commit({});
    return;
  }
  double ms = scheduler::PlannedStepMs(config_.cost, cell.plan);
  if (!config_.step_time_ratios.empty()) {
    const std::vector<double>& ratios = config_.step_time_ratios.For(
        cell.plan.prefill_tokens, cell.plan.decode_tokens);
    ms *= ratios[noise_() % ratios.size()];
  }
  cell.online.Record(scheduler::SampleOf(cell.plan, ms));
  cell.busy = true;
  cell.busy_until = now_ms_ + ms;
  cell.busy_ms += ms;
  ++cell.steps;
  cell.batch_sum += static_cast<int64_t>(cell.plan.items.size());
}

double ClusterRun::NextEventMs() const {
  double t = next_ < reqs_.size() ? reqs_[next_].arrival_s * 1000.0 : kNever;
  if (!handoffs_.empty()) t = std::min(t, handoffs_.top().at_ms);
  for (const auto& c : cells_) t = std::min(t, c->busy_until);
  return t;
}

ClusterResult ClusterRun::Run() {
  if (reqs_.empty()) return {};
  now_ms_ = reqs_.front().arrival_s * 1000.0;
  while (true) {
    const double t = NextEventMs();
    if (t == kNever) break;
    now_ms_ = std::max(now_ms_, t);
    for (auto& c : cells_) {
      if (c->busy && c->busy_until <= now_ms_) FinishStep(*c);
    }
    while (!handoffs_.empty() && handoffs_.top().at_ms <= now_ms_) {
      Deliver(handoffs_.top());
      handoffs_.pop();
    }
    for (; next_ < reqs_.size() && reqs_[next_].arrival_s * 1000.0 <= now_ms_;
         ++next_) {
      Arrive(next_);
    }
    for (auto& c : cells_) {
      if (!c->busy) StartStep(*c);
    }
  }
  return Summarise();
}

ClusterResult ClusterRun::Summarise() const {
  ClusterResult r;
  std::vector<double> ttft;
  int64_t prompt_tokens = 0, cached = 0, met = 0, output_tokens = 0;
  double end_ms = now_ms_;
  for (size_t i = 0; i < reqs_.size(); ++i) {
    const Progress& p = progress_[i];
    prompt_tokens += reqs_[i].prompt_tokens;
    cached += p.cached;
    if (p.rejected || p.tokens < reqs_[i].output_tokens) {
      ++r.rejected;
      continue;
    }
    ++r.completed;
    output_tokens += p.tokens;
    const double first = p.first_ms - p.arrival_ms;
    ttft.push_back(first);
    const double mean_gap =
        p.tokens > 1 ? (p.last_ms - p.first_ms) / (p.tokens - 1) : 0;
    if ((config_.slo.ttft_ms <= 0 || first <= config_.slo.ttft_ms) &&
        (config_.slo.itl_ms <= 0 || mean_gap <= config_.slo.itl_ms)) {
      ++met;
    }
  }
  const double start_ms = reqs_.front().arrival_s * 1000.0;
  r.duration_s = (end_ms - start_ms) / 1000.0;
  r.ttft_ms = scheduler::ComputePercentiles(std::move(ttft));
  r.itl_ms = scheduler::ComputePercentiles(itl_);
  r.handoffs = handed_off_;
  r.prefix_hit_rate =
      prompt_tokens > 0 ? static_cast<double>(cached) / prompt_tokens : 0;
  r.slo_attainment =
      r.completed > 0 ? static_cast<double>(met) / r.completed : 0;
  if (r.duration_s > 0) {
    r.output_tokens_per_s = output_tokens / r.duration_s;
    r.goodput_rps = met / r.duration_s;
  }
  if (config_.record_token_times) {
    r.token_ms.resize(reqs_.size());
    for (size_t i = 0; i < reqs_.size(); ++i) {
      r.token_ms[order_[i]] = progress_[i].token_ms;
    }
  }
  for (const auto& c : cells_) {
    r.preemptions += c->policy.preemptions();
    SimCellStats s{c->prefill_role, c->routed, c->steps};
    if (c->steps > 0) s.mean_batch = static_cast<double>(c->batch_sum) / c->steps;
    if (end_ms > start_ms) s.busy_fraction = c->busy_ms / (end_ms - start_ms);
    r.cells.push_back(s);
  }
  return r;
}

}  // namespace

absl::Status CheckClusterConfig(const ClusterConfig& c) {
  if (c.cells < 1 || c.cells > 4096) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cells %d must be within 1..4096", c.cells));
  }
  if (c.prefill_cells < 0 || (c.prefill_cells > 0 && c.prefill_cells >= c.cells)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "prefill cells %d must be less than cells %d (at least one cell must "
        "decode)",
        c.prefill_cells, c.cells));
  }
  if (c.pd_min_prompt_tokens < 1 || c.handoff_fixed_ms < 0 ||
      c.handoff_ms_per_token < 0 || c.poll_interval_ms < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pd_min_prompt_tokens %d must be >= 1; handoff costs %g ms + %g "
        "ms/token and poll interval %g ms must be >= 0",
        c.pd_min_prompt_tokens, c.handoff_fixed_ms, c.handoff_ms_per_token,
        c.poll_interval_ms));
  }
  if (c.cost.StepMs(0, 1) <= 0 && c.cost.prefill_token_ms <= 0) {
    return absl::InvalidArgumentError(
        "the step cost model costs nothing (every coefficient 0): simulated "
        "time would not advance");
  }
  return absl::OkStatus();
}

ClusterResult SimulateCluster(absl::Span<const TraceRequest> trace,
                              const ClusterConfig& config,
                              absl::Span<const std::vector<int32_t>> prompts) {
  ClusterRun run(trace, config, prompts);
  return run.Run();
}

std::vector<SizingRow> SizeCluster(absl::Span<const TraceRequest> trace,
                                   const ClusterConfig& config,
                                   int max_cells) {
  const double share =
      static_cast<double>(config.prefill_cells) / config.cells;
  std::vector<int> sizes;
  for (int n = 1; n < max_cells; n *= 2) sizes.push_back(n);
  sizes.push_back(max_cells);
  std::vector<SizingRow> rows;
  for (int n : sizes) {
    ClusterConfig c = config;
    c.cells = n;
    c.prefill_cells =
        share <= 0 || n < 2
            ? 0
            : std::clamp(static_cast<int>(std::lround(share * n)), 1, n - 1);
    rows.push_back({n, c.prefill_cells, SimulateCluster(trace, c)});
  }
  return rows;
}

}  // namespace pdserve::frontend
