// Trace-driven simulation of the scheduling policy against a linear step
// cost model, for sizing a deployment without hardware. Pure: no IO, no
// clock (time is simulated), deterministic.
#ifndef PDSERVE_SCHEDULER_SIMULATOR_H_
#define PDSERVE_SCHEDULER_SIMULATOR_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "scheduler/policy.h"

namespace pdserve::scheduler {

// One request of a trace: arrival time (seconds from the trace start),
// prompt and output lengths (tokens, > 0), priority. Requests of the same
// prefix_group (> 0; 0 = none) share their first prefix_tokens prompt
// tokens (<= prompt_tokens): a system prompt, a conversation so far.
struct TraceRequest {
  double arrival_s = 0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  int32_t priority = 0;
  int64_t prefix_group = 0;
  int64_t prefix_tokens = 0;
};

// Parses a trace: CSV with columns arrival_s,prompt_tokens,output_tokens
// [,priority[,prefix_group,prefix_tokens]] (a header line and '#' comments
// allowed), or JSON: an array of objects with those keys (or one object per
// line). INVALID_ARGUMENT names the line / element and the bad value.
absl::StatusOr<std::vector<TraceRequest>> ParseTrace(absl::string_view text);

// Step time in milliseconds = fixed_ms + prefill_token_ms * prefill tokens
// + decode_seq_ms * decoding sequences + attention_ms * millions of
// attended pairs (StepPlan::attended_pairs / 1e6: what grows with context).
struct StepCostModel {
  double fixed_ms = 2.0;
  double prefill_token_ms = 0.05;
  double decode_seq_ms = 0.5;
  double attention_ms = 0;  // per million attended (token, position) pairs
  double StepMs(int64_t prefill_tokens, int64_t decode_seqs,
                double attended_mpairs = 0) const {
    return fixed_ms + prefill_token_ms * static_cast<double>(prefill_tokens) +
           decode_seq_ms * static_cast<double>(decode_seqs) +
           attention_ms * attended_mpairs;
  }
};

// A measured engine step, for calibration (attended_mpairs: the plan's
// attended_pairs / 1e6; 0 in logs that predate it).
struct StepSample {
  int64_t prefill_tokens = 0;
  int64_t decode_seqs = 0;
  double step_ms = 0;
  double attended_mpairs = 0;
};

// Parses calibration samples: CSV prefill_tokens,decode_seqs,step_ms
// [,attended_mpairs] (what the scheduler's --step-log writes).
absl::StatusOr<std::vector<StepSample>> ParseStepSamples(absl::string_view text);

// How measured steps spread around `cost`: each sample's step_ms over the
// model's time for it, kept apart by kind: decode-only steps, mixed steps
// (prefill beside decoding sequences) and prefill-only steps. A linear
// model misses each kind differently (a prefill-only chunk deep into a long
// prompt can take 2x its modelled time while mixed steps sit within 10%),
// so a ratio of one kind must not scale a step of another. Samples the
// model gives no time are skipped. A simulator that scales each step by a
// ratio drawn from its kind reproduces the measured jitter (the tail
// latencies), not just the mean.
struct StepTimeSpread {
  std::vector<double> decode_only, mixed, prefill_only;
  bool empty() const {
    return decode_only.empty() && mixed.empty() && prefill_only.empty();
  }
  // The ratios for a step of that kind; when none were measured, the
  // nearest kind's (mixed: prefill-only, then decode-only; prefill-only:
  // mixed, then decode-only; decode-only: mixed, then prefill-only).
  // Empty only when the spread is.
  const std::vector<double>& For(int64_t prefill_tokens,
                                 int64_t decode_seqs) const;
};
StepTimeSpread StepTimeRatios(absl::Span<const StepSample> samples,
                              const StepCostModel& cost);

// Least-squares fit of the cost model to measured steps. Needs at least 3
// samples that vary in both counts; INVALID_ARGUMENT otherwise. Negative
// coefficients are clamped to 0 (and the rest refitted); attention_ms is
// fitted only when the samples carry attended pairs.
absl::StatusOr<StepCostModel> FitStepCost(absl::Span<const StepSample> samples);

// The step-cost model the scheduler fits online (--itl-slowdown): to the
// last 256 measured steps, refitted at every 8th; a fit without a per-token
// prefill cost is ignored and the previous one kept. Not thread-safe (the
// scheduler's loop thread owns one; so does each simulated cell).
class OnlineStepCost {
 public:
  void Record(const StepSample& sample);
  // Nullopt until the first usable fit.
  const std::optional<StepCostModel>& model() const { return model_; }

 private:
  std::deque<StepSample> samples_;
  int64_t recorded_ = 0;
  std::optional<StepCostModel> model_;
};

// The per-step token budget that bounds inter-token latency: while
// `decoding` sequences decode (holding `decoding_kv_tokens` KV tokens),
// prefill may add at most (slowdown - 1) times the cost of a decode-only
// step, i.e. decoding + that many prefill tokens at their cost from
// position `prefill_position` on (attention grows with it), but at least
// decoding + min_prefill and at most max_budget. A step may always take
// `min_step_ms` (the ITL floor: with few sequences decoding, a decode-only
// step is so short that its slowdown alone would starve prefill). With
// slowdown <= 1, nothing decoding, or a cost model without a per-token
// prefill cost: max_budget. Pure; the scheduler shell and the simulators
// share it.
int64_t AdaptiveStepBudget(const StepCostModel& cost, int64_t decoding,
                           double slowdown, int64_t min_prefill,
                           int64_t max_budget,
                           int64_t decoding_kv_tokens = 0,
                           int64_t prefill_position = 0,
                           double min_step_ms = 0);

// AdaptiveStepBudget for `policy`'s state now.
int64_t AdaptiveStepBudgetFor(const Policy& policy, const StepCostModel& cost,
                              double slowdown, int64_t min_prefill,
                              int64_t max_budget, double min_step_ms = 0);

// Prefill tokens a step may carry while sequences decode before the first
// online fit exists (the cost of a token is not known yet).
inline constexpr int64_t kColdStartPrefillTokens = 32;

// The budget the scheduler plans its next step with under --itl-slowdown
// (> 1): AdaptiveStepBudgetFor with `online`'s fit; before the first fit,
// decoding + max(min_prefill, kColdStartPrefillTokens) while sequences
// decode (so a long prompt arriving first cannot stall every stream for
// whole chunks while the cost is learnt), max_budget otherwise.
int64_t OnlineStepBudget(const Policy& policy, const OnlineStepCost& online,
                         double slowdown, int64_t min_prefill,
                         int64_t max_budget, double min_step_ms = 0);

// The scheduler's budget for its next step: with `catching_up` (a request
// resumed after an engine or scheduler loss is recomputing prompt + tokens
// so far, its client's stream paused until its next token) the whole
// max_budget, so the pause lasts as few steps as possible; otherwise
// OnlineStepBudget.
int64_t SchedulerStepBudget(const Policy& policy, const OnlineStepCost& online,
                            double slowdown, int64_t min_prefill,
                            int64_t max_budget, bool catching_up,
                            double min_step_ms = 0);

// The sample a step of `plan` taking `step_ms` gives.
StepSample SampleOf(const StepPlan& plan, double step_ms);
// What the cost model says a step of `plan` takes.
double PlannedStepMs(const StepCostModel& cost, const StepPlan& plan);

// Latency percentiles in milliseconds.
struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
  int64_t count = 0;
};
Percentiles ComputePercentiles(std::vector<double> values);

struct SimulationResult {
  Percentiles ttft_ms;          // arrival -> first token
  Percentiles itl_ms;           // gaps between consecutive tokens of a request
  double duration_s = 0;        // first arrival -> last token
  double output_tokens_per_s = 0;
  double requests_per_s = 0;
  int64_t completed = 0;
  int64_t rejected = 0;         // refused by the policy (queue full, too big)
  int64_t steps = 0;
  int64_t preemptions = 0;
  double mean_batch = 0;        // sequences per step
};

// Replays `trace` (any order; sorted by arrival) through a Policy with
// `config` and `pool`, stepping simulated time by `cost`. With
// itl_slowdown > 1 each step's budget is AdaptiveStepBudget(cost, ...,
// itl_slowdown, 1, config.step_token_budget), as the live scheduler does
// with --itl-slowdown (there fitted online to measured steps).
SimulationResult Simulate(absl::Span<const TraceRequest> trace,
                          const PolicyConfig& config, const PoolGeometry& pool,
                          const StepCostModel& cost, double itl_slowdown = 0,
                          double itl_floor_ms = 0);

}  // namespace pdserve::scheduler

#endif  // PDSERVE_SCHEDULER_SIMULATOR_H_
