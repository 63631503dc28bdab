#include "scheduler/simulator.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace pdserve::scheduler {
namespace {

absl::Status CheckRequest(const TraceRequest& r, const std::string& where) {
  if (r.arrival_s < 0 || !std::isfinite(r.arrival_s)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: arrival_s %g must be a finite number >= 0", where, r.arrival_s));
  }
  if (r.prompt_tokens <= 0 || r.output_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: prompt_tokens %d and output_tokens %d must be > 0", where,
        r.prompt_tokens, r.output_tokens));
  }
  if (r.prefix_group < 0 || r.prefix_tokens < 0 ||
      r.prefix_tokens > r.prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: prefix_group %d must be >= 0 and prefix_tokens %d within 0.."
        "prompt_tokens %d",
        where, r.prefix_group, r.prefix_tokens, r.prompt_tokens));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TraceRequest>> ParseJsonTrace(absl::string_view text) {
  std::vector<nlohmann::json> items;
  try {
    auto doc = nlohmann::json::parse(text.begin(), text.end());
    if (doc.is_array()) {
      for (auto& e : doc) items.push_back(e);
    } else {
      items.push_back(doc);
    }
  } catch (const nlohmann::json::exception&) {
    // JSON Lines: one object per line.
    int line_no = 0;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      ++line_no;
      line = absl::StripAsciiWhitespace(line);
      if (line.empty()) continue;
      try {
        items.push_back(nlohmann::json::parse(line.begin(), line.end()));
      } catch (const nlohmann::json::exception& e) {
        return absl::InvalidArgumentError(
            absl::StrFormat("trace line %d: %s", line_no, e.what()));
      }
    }
  }
  std::vector<TraceRequest> out;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& e = items[i];
    const std::string where = absl::StrFormat("trace element %d", i);
    if (!e.is_object() || !e.contains("arrival_s") ||
        !e.contains("prompt_tokens") || !e.contains("output_tokens")) {
      return absl::InvalidArgumentError(
          where + ": needs arrival_s, prompt_tokens and output_tokens");
    }
    TraceRequest r;
    try {
      r.arrival_s = e.at("arrival_s").get<double>();
      r.prompt_tokens = e.at("prompt_tokens").get<int64_t>();
      r.output_tokens = e.at("output_tokens").get<int64_t>();
      r.priority = e.value("priority", 0);
      r.prefix_group = e.value("prefix_group", int64_t{0});
      r.prefix_tokens = e.value("prefix_tokens", int64_t{0});
    } catch (const nlohmann::json::exception& ex) {
      return absl::InvalidArgumentError(where + ": " + ex.what());
    }
    if (auto s = CheckRequest(r, where); !s.ok()) return s;
    out.push_back(r);
  }
  return out;
}

// Splits CSV text into rows of numbers, skipping blank lines, '#' comments
// and a header line (the first line when it does not start with a digit).
absl::StatusOr<std::vector<std::vector<double>>> ParseCsvNumbers(
    absl::string_view text, size_t min_cols, size_t max_cols) {
  std::vector<std::vector<double>> rows;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    if (rows.empty() && !(std::isdigit(line[0]) || line[0] == '.' ||
                          line[0] == '-')) {
      continue;  // header
    }
    std::vector<double> row;
    for (absl::string_view cell : absl::StrSplit(line, ',')) {
      double v;
      if (!absl::SimpleAtod(absl::StripAsciiWhitespace(cell), &v)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "line %d: '%s' is not a number", line_no, std::string(cell)));
      }
      row.push_back(v);
    }
    if (row.size() < min_cols || row.size() > max_cols) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "line %d: %d columns; expected %d to %d", line_no, row.size(),
          min_cols, max_cols));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

constexpr int kTerms = 4;  // fixed, prefill tokens, decode seqs, attention

// Solves the kTerms x kTerms system a x = b (Gaussian elimination with
// partial pivoting); false if singular.
bool Solve(double a[kTerms][kTerms], double b[kTerms], double x[kTerms]) {
  for (int c = 0; c < kTerms; ++c) {
    int p = c;
    for (int r = c + 1; r < kTerms; ++r) {
      if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
    }
    if (std::fabs(a[p][c]) < 1e-12) return false;
    std::swap(a[p], a[c]);
    std::swap(b[p], b[c]);
    for (int r = 0; r < kTerms; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (int k = 0; k < kTerms; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  for (int i = 0; i < kTerms; ++i) x[i] = b[i] / a[i][i];
  return true;
}

// Least squares over the columns in `use` (the others fixed at 0).
bool FitColumns(absl::Span<const StepSample> samples, const bool use[kTerms],
                double coef[kTerms]) {
  double a[kTerms][kTerms] = {}, b[kTerms] = {};
  for (const StepSample& s : samples) {
    const double f[kTerms] = {1.0, static_cast<double>(s.prefill_tokens),
                              static_cast<double>(s.decode_seqs),
                              s.attended_mpairs};
    for (int i = 0; i < kTerms; ++i) {
      b[i] += use[i] ? f[i] * s.step_ms : 0;
      for (int j = 0; j < kTerms; ++j) {
        a[i][j] += use[i] && use[j] ? f[i] * f[j] : 0;
      }
    }
  }
  for (int i = 0; i < kTerms; ++i) {
    if (!use[i]) a[i][i] = 1;  // pins the unused coefficient to 0
  }
  return Solve(a, b, coef);
}

}  // namespace

absl::StatusOr<std::vector<TraceRequest>> ParseTrace(absl::string_view text) {
  absl::string_view t = absl::StripLeadingAsciiWhitespace(text);
  if (!t.empty() && (t[0] == '[' || t[0] == '{')) return ParseJsonTrace(t);
  auto rows = ParseCsvNumbers(text, 3, 6);
  if (!rows.ok()) return rows.status();
  std::vector<TraceRequest> out;
  for (size_t i = 0; i < rows->size(); ++i) {
    const auto& row = (*rows)[i];
    if (row.size() == 5) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "trace row %d: prefix_group needs prefix_tokens (6 columns)", i + 1));
    }
    TraceRequest r{row[0], static_cast<int64_t>(row[1]),
                   static_cast<int64_t>(row[2]),
                   row.size() > 3 ? static_cast<int32_t>(row[3]) : 0,
                   row.size() > 5 ? static_cast<int64_t>(row[4]) : 0,
                   row.size() > 5 ? static_cast<int64_t>(row[5]) : 0};
    if (auto s = CheckRequest(r, absl::StrFormat("trace row %d", i + 1));
        !s.ok()) {
      return s;
    }
    out.push_back(r);
  }
  return out;
}

absl::StatusOr<std::vector<StepSample>> ParseStepSamples(absl::string_view text) {
  auto rows = ParseCsvNumbers(text, 3, 4);
  if (!rows.ok()) return rows.status();
  std::vector<StepSample> out;
  for (const auto& row : *rows) {
    out.push_back({static_cast<int64_t>(row[0]), static_cast<int64_t>(row[1]),
                   row[2], row.size() > 3 ? row[3] : 0});
  }
  return out;
}

absl::StatusOr<StepCostModel> FitStepCost(absl::Span<const StepSample> samples) {
  if (samples.size() < 3) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "calibration needs at least 3 step samples; got %d", samples.size()));
  }
  bool use[kTerms] = {true, true, true, false};
  for (const StepSample& s : samples) use[3] = use[3] || s.attended_mpairs > 0;
  double coef[kTerms];
  for (int round = 0; round < kTerms; ++round) {
    if (!FitColumns(samples, use, coef)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "calibration samples (%d) do not vary in both prefill tokens and "
          "decode sequences; cannot fit the step cost",
          samples.size()));
    }
    bool changed = false;
    for (int i = 0; i < kTerms; ++i) {
      if (use[i] && coef[i] < 0) use[i] = false, changed = true;
    }
    if (!changed) break;
  }
  return StepCostModel{std::max(0.0, coef[0]), std::max(0.0, coef[1]),
                       std::max(0.0, coef[2]), std::max(0.0, coef[3])};
}

StepTimeSpread StepTimeRatios(absl::Span<const StepSample> samples,
                              const StepCostModel& cost) {
  StepTimeSpread spread;
  for (const StepSample& s : samples) {
    const double model =
        cost.StepMs(s.prefill_tokens, s.decode_seqs, s.attended_mpairs);
    if (model <= 0 || s.step_ms <= 0) continue;
    std::vector<double>& kind =
        s.prefill_tokens == 0 ? spread.decode_only
        : s.decode_seqs > 0   ? spread.mixed
                              : spread.prefill_only;
    kind.push_back(s.step_ms / model);
  }
  return spread;
}

const std::vector<double>& StepTimeSpread::For(int64_t prefill_tokens,
                                               int64_t decode_seqs) const {
  const std::vector<double>* order[3];
  if (prefill_tokens == 0) {
    order[0] = &decode_only, order[1] = &mixed, order[2] = &prefill_only;
  } else if (decode_seqs > 0) {
    order[0] = &mixed, order[1] = &prefill_only, order[2] = &decode_only;
  } else {
    order[0] = &prefill_only, order[1] = &mixed, order[2] = &decode_only;
  }
  for (const std::vector<double>* ratios : order) {
    if (!ratios->empty()) return *ratios;
  }
  return decode_only;
}

void OnlineStepCost::Record(const StepSample& sample) {
  samples_.push_back(sample);
  if (samples_.size() > 256) samples_.pop_front();
  if (++recorded_ % 8 != 0) return;
  auto fit =
      FitStepCost(std::vector<StepSample>(samples_.begin(), samples_.end()));
  if (fit.ok() && fit->prefill_token_ms > 0) model_ = *fit;
}

Percentiles ComputePercentiles(std::vector<double> values) {
  Percentiles p;
  p.count = static_cast<int64_t>(values.size());
  if (values.empty()) return p;
  std::sort(values.begin(), values.end());
  auto at = [&](double q) {  // nearest rank
    size_t rank = static_cast<size_t>(std::ceil(q * values.size()));
    return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
  };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  double sum = 0;
  for (double v : values) sum += v;
  p.mean = sum / static_cast<double>(values.size());
  return p;
}

int64_t AdaptiveStepBudget(const StepCostModel& cost, int64_t decoding,
                           double slowdown, int64_t min_prefill,
                           int64_t max_budget, int64_t decoding_kv_tokens,
                           int64_t prefill_position, double min_step_ms) {
  if (slowdown <= 1 || decoding <= 0 || cost.prefill_token_ms <= 0) {
    return max_budget;
  }
  // A decode at context c attends c + 1 positions.
  const double decode_mpairs =
      static_cast<double>(decoding_kv_tokens + decoding) / 1e6;
  const double decode_ms = cost.StepMs(0, decoding, decode_mpairs);
  const double extra_ms =
      std::max((slowdown - 1.0) * decode_ms, min_step_ms - decode_ms);
  // Each prefill token attends about prefill_position more positions.
  const double token_ms =
      cost.prefill_token_ms +
      cost.attention_ms * static_cast<double>(prefill_position) / 1e6;
  const double prefill =
      std::min(extra_ms / token_ms, static_cast<double>(max_budget));
  const int64_t budget =
      decoding + std::max(min_prefill, static_cast<int64_t>(prefill));
  return std::min(max_budget, budget);
}

int64_t AdaptiveStepBudgetFor(const Policy& policy, const StepCostModel& cost,
                              double slowdown, int64_t min_prefill,
                              int64_t max_budget, double min_step_ms) {
  return AdaptiveStepBudget(cost, policy.decoding(), slowdown, min_prefill,
                            max_budget, policy.decoding_kv_tokens(),
                            policy.next_prefill_position(), min_step_ms);
}

int64_t OnlineStepBudget(const Policy& policy, const OnlineStepCost& online,
                         double slowdown, int64_t min_prefill,
                         int64_t max_budget, double min_step_ms) {
  if (online.model().has_value()) {
    return AdaptiveStepBudgetFor(policy, *online.model(), slowdown,
                                 min_prefill, max_budget, min_step_ms);
  }
  const int64_t decoding = policy.decoding();
  if (slowdown <= 1 || decoding == 0) return max_budget;
  return std::min(max_budget, decoding + std::max(min_prefill,
                                                  kColdStartPrefillTokens));
}

int64_t SchedulerStepBudget(const Policy& policy, const OnlineStepCost& online,
                            double slowdown, int64_t min_prefill,
                            int64_t max_budget, bool catching_up,
                            double min_step_ms) {
  if (catching_up) return max_budget;
  return OnlineStepBudget(policy, online, slowdown, min_prefill, max_budget,
                          min_step_ms);
}

StepSample SampleOf(const StepPlan& plan, double step_ms) {
  return {plan.prefill_tokens, plan.decode_tokens, step_ms,
          static_cast<double>(plan.attended_pairs) / 1e6};
}

double PlannedStepMs(const StepCostModel& cost, const StepPlan& plan) {
  return cost.StepMs(plan.prefill_tokens, plan.decode_tokens,
                     static_cast<double>(plan.attended_pairs) / 1e6);
}

SimulationResult Simulate(absl::Span<const TraceRequest> trace,
                          const PolicyConfig& config, const PoolGeometry& pool,
                          const StepCostModel& cost, double itl_slowdown,
                          double itl_floor_ms) {
  std::vector<TraceRequest> reqs(trace.begin(), trace.end());
  std::stable_sort(reqs.begin(), reqs.end(), [](const auto& a, const auto& b) {
    return a.arrival_s < b.arrival_s;
  });
  SimulationResult result;
  if (reqs.empty()) return result;
  Policy policy(config, pool);
  // Per request: last token time (ms) and whether it produced one yet.
  std::vector<double> last_token_ms(reqs.size(), -1);
  std::vector<double> ttft, itl;
  double now_ms = reqs.front().arrival_s * 1000.0;
  const double start_ms = now_ms;
  size_t next = 0;
  int64_t batch_sum = 0, output_tokens = 0;
  while (true) {
    for (; next < reqs.size() && reqs[next].arrival_s * 1000.0 <= now_ms;
         ++next) {
      const TraceRequest& r = reqs[next];
      if (!policy.Submit({next, r.priority, r.prompt_tokens, r.output_tokens})
               .ok()) {
        ++result.rejected;
      }
    }
    if (itl_slowdown > 1) {
      policy.set_step_token_budget(AdaptiveStepBudgetFor(
          policy, cost, itl_slowdown, 1, config.step_token_budget,
          itl_floor_ms));
    }
    StepPlan plan = policy.Plan();
    if (plan.items.empty()) {
      // Only releases, or nothing runnable: wait for the next arrival.
      policy.Commit({});
      if (next >= reqs.size()) break;
      now_ms = std::max(now_ms, reqs[next].arrival_s * 1000.0);
      continue;
    }
    now_ms += PlannedStepMs(cost, plan);
    ++result.steps;
    batch_sum += static_cast<int64_t>(plan.items.size());
    for (const PlanItem& item : plan.items) {
      if (item.prefill && !item.completes_prompt) continue;
      const TraceRequest& r = reqs[item.id];
      double& last = last_token_ms[item.id];
      if (last < 0) {
        ttft.push_back(now_ms - r.arrival_s * 1000.0);
      } else {
        itl.push_back(now_ms - last);
      }
      last = now_ms;
      ++output_tokens;
    }
    policy.Commit({});  // the policy ends each request at its output length
  }
  result.completed = static_cast<int64_t>(reqs.size()) - result.rejected;
  result.preemptions = policy.preemptions();
  result.ttft_ms = ComputePercentiles(std::move(ttft));
  result.itl_ms = ComputePercentiles(std::move(itl));
  result.duration_s = (now_ms - start_ms) / 1000.0;
  if (result.duration_s > 0) {
    result.output_tokens_per_s = output_tokens / result.duration_s;
    result.requests_per_s = result.completed / result.duration_s;
  }
  if (result.steps > 0) {
    result.mean_batch = static_cast<double>(batch_sum) / result.steps;
  }
  return result;
}

}  // namespace pdserve::scheduler
