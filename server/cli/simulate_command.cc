// `pdserve simulate --trace FILE [--cells N --prefill-cells P] [--sizing M]`:
// replays a request trace through a simulated cluster (each cell the
// scheduler's policy against a linear step-cost model, routed as the front
// end routes) and prints TTFT and inter-token latency percentiles,
// throughput, SLO attainment and goodput, and optionally a sizing table.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "config/tool_options.h"
#include "scheduler/simulator.h"
#include "server/frontend/cluster_simulator.h"
#include "server/cli/command.h"

namespace pdserve::cli {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json ToJson(const scheduler::Percentiles& p) {
  return {{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"mean", p.mean},
          {"count", p.count}};
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "pdserve simulate: %s\n", std::string(s.message()).c_str());
  return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

// The calibration files' steps (empty without --calibration).
absl::StatusOr<std::vector<scheduler::StepSample>> CalibrationSamples(
    const config::SimulateOptions& o) {
  std::vector<scheduler::StepSample> samples;
  for (absl::string_view path :
       absl::StrSplit(o.calibration, ',', absl::SkipEmpty())) {
    auto text = ReadFile(std::string(path));
    if (!text.ok()) return text.status();
    auto parsed = scheduler::ParseStepSamples(*text);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", parsed.status().message()));
    }
    samples.insert(samples.end(), parsed->begin(), parsed->end());
  }
  return samples;
}

// The step cost: defaults, then the fit to the calibration samples, then
// the coefficients given on the command line.
absl::StatusOr<scheduler::StepCostModel> CostModel(
    const config::SimulateOptions& o,
    const std::vector<scheduler::StepSample>& samples) {
  scheduler::StepCostModel cost;
  if (!samples.empty() || !o.calibration.empty()) {
    auto fit = scheduler::FitStepCost(samples);
    if (!fit.ok()) return fit.status();
    cost = *fit;
  }
  if (o.fixed_ms) cost.fixed_ms = *o.fixed_ms;
  if (o.prefill_token_ms) cost.prefill_token_ms = *o.prefill_token_ms;
  if (o.decode_seq_ms) cost.decode_seq_ms = *o.decode_seq_ms;
  if (o.attention_ms) cost.attention_ms = *o.attention_ms;
  return cost;
}

absl::StatusOr<frontend::ClusterConfig> ClusterOf(
    const config::SimulateOptions& o) {
  frontend::ClusterConfig c;
  c.cells = static_cast<int>(o.cells);
  c.prefill_cells = static_cast<int>(o.prefill_cells);
  c.policy.step_token_budget = o.budget;
  c.policy.prefill_chunk = o.chunk;
  c.policy.max_running = o.max_running;
  c.policy.max_waiting = o.max_queue;
  c.pool = {o.page_size, o.pages, o.max_seq_len, o.prefix_cache};
  auto samples = CalibrationSamples(o);
  if (!samples.ok()) return samples.status();
  auto cost = CostModel(o, *samples);
  if (!cost.ok()) return cost.status();
  c.cost = *cost;
  if (o.step_noise) {
    if (samples->empty()) {
      return absl::InvalidArgumentError(
          "--step-noise needs --calibration (the measured steps to draw "
          "from)");
    }
    c.step_time_ratios = scheduler::StepTimeRatios(*samples, c.cost);
  }
  c.itl_slowdown = o.itl_slowdown;
  c.itl_floor_ms = o.itl_floor_ms;
  if (o.budget_fit != "online" && o.budget_fit != "given") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--budget-fit ", o.budget_fit, " must be online or given"));
  }
  c.online_fit = o.budget_fit == "online";
  if (o.router == "cache") {
    c.routing = frontend::SimRouting::kRouter;
  } else if (o.router == "prefix") {
    c.routing = frontend::SimRouting::kRendezvous;
  } else if (o.router == "round-robin") {
    c.routing = frontend::SimRouting::kRoundRobin;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--router ", o.router, " must be cache, prefix or round-robin"));
  }
  c.pd_min_prompt_tokens = o.pd_min_prompt_tokens;
  c.handoff_fixed_ms = o.handoff_fixed_ms;
  c.handoff_ms_per_token = o.handoff_ms_per_token;
  c.slo = {o.slo_ttft_ms, o.slo_itl_ms};
  if (absl::Status s = frontend::CheckClusterConfig(c); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cells ", o.cells, " --prefill-cells ", o.prefill_cells, ": ",
        s.message()));
  }
  return c;
}

nlohmann::json ResultJson(const frontend::ClusterResult& r) {
  int64_t steps = 0;
  double batched = 0;
  nlohmann::json cells = nlohmann::json::array();
  for (const frontend::SimCellStats& c : r.cells) {
    steps += c.steps;
    batched += c.mean_batch * static_cast<double>(c.steps);
    cells.push_back({{"role", c.prefill_role ? "prefill" : "decode"},
                     {"routed", c.routed}, {"steps", c.steps},
                     {"mean_batch", c.mean_batch},
                     {"busy_fraction", c.busy_fraction}});
  }
  return {{"completed", r.completed}, {"rejected", r.rejected},
          {"steps", steps}, {"preemptions", r.preemptions},
          {"mean_batch", steps > 0 ? batched / static_cast<double>(steps) : 0},
          {"duration_s", r.duration_s},
          {"output_tokens_per_s", r.output_tokens_per_s},
          {"requests_per_s", r.duration_s > 0 ? r.completed / r.duration_s : 0},
          {"ttft_ms", ToJson(r.ttft_ms)}, {"itl_ms", ToJson(r.itl_ms)},
          {"handoffs", r.handoffs}, {"prefix_hit_rate", r.prefix_hit_rate},
          {"slo_attainment", r.slo_attainment},
          {"goodput_rps", r.goodput_rps}, {"cells", cells}};
}

void PrintText(const frontend::ClusterConfig& c,
               const frontend::ClusterResult& r, size_t requests) {
  std::printf("cost model: %.3f ms + %.4f ms/prefill token + %.3f ms/decoding "
              "seq + %.3f ms/million attended pairs\n",
              c.cost.fixed_ms, c.cost.prefill_token_ms, c.cost.decode_seq_ms,
              c.cost.attention_ms);
  const nlohmann::json j = ResultJson(r);
  std::printf("cells %d (prefill %d)  requests %zu  completed %ld  rejected %ld  "
              "steps %ld  preemptions %ld  mean batch %.1f  hand-offs %ld  "
              "prefix hits %.1f%%\n",
              c.cells, c.prefill_cells, requests, r.completed, r.rejected,
              j["steps"].get<long>(), r.preemptions,
              j["mean_batch"].get<double>(), r.handoffs,
              100 * r.prefix_hit_rate);
  std::printf("%-10s %10s %10s %10s %10s\n", "ms", "p50", "p90", "p99", "mean");
  for (auto [name, p] : {std::pair{"TTFT", r.ttft_ms}, std::pair{"ITL", r.itl_ms}}) {
    std::printf("%-10s %10.2f %10.2f %10.2f %10.2f\n", name, p.p50, p.p90,
                p.p99, p.mean);
  }
  std::printf("throughput %.1f output tok/s, %.2f req/s over %.2f s; SLO met "
              "by %.1f%% (goodput %.2f req/s)\n",
              r.output_tokens_per_s, j["requests_per_s"].get<double>(),
              r.duration_s, 100 * r.slo_attainment, r.goodput_rps);
}

void PrintSizing(const std::vector<frontend::SizingRow>& rows) {
  std::printf("\nsizing (the same trace):\n%6s %8s %10s %10s %10s %10s %12s %9s %10s\n",
              "cells", "prefill", "TTFT p50", "TTFT p99", "ITL p50",
              "ITL p99", "out tok/s", "SLO met", "goodput/s");
  for (const frontend::SizingRow& row : rows) {
    const frontend::ClusterResult& r = row.result;
    std::printf("%6d %8d %10.1f %10.1f %10.1f %10.1f %12.1f %8.1f%% %10.2f\n",
                row.cells, row.prefill_cells, r.ttft_ms.p50, r.ttft_ms.p99,
                r.itl_ms.p50, r.itl_ms.p99, r.output_tokens_per_s,
                100 * r.slo_attainment, r.goodput_rps);
  }
}

int RunSimulate(int argc, char** argv) {
  const auto& table = config::SimulateFlagTable();
  auto command =
      config::ParseCommand(table, argc, argv, config::Layers::Process());
  if (!command.ok()) return Fail(command.status());
  const config::SimulateOptions& o = command->options;
  if (command->resolution.help || o.trace.empty()) {
    const bool help = command->resolution.help;
    std::fprintf(help ? stdout : stderr,
                 "usage: pdserve simulate --trace FILE [options]\n%s",
                 table.Usage().c_str());
    return help ? 0 : 2;
  }
  auto text = ReadFile(o.trace);
  if (!text.ok()) return Fail(text.status());
  auto trace = scheduler::ParseTrace(*text);
  if (!trace.ok()) return Fail(trace.status());
  auto cluster = ClusterOf(o);
  if (!cluster.ok()) return Fail(cluster.status());
  const frontend::ClusterResult r = frontend::SimulateCluster(*trace, *cluster);
  std::vector<frontend::SizingRow> sizing;
  if (o.sizing > 0) {
    sizing = frontend::SizeCluster(*trace, *cluster, static_cast<int>(o.sizing));
  }
  if (!o.json) {
    PrintText(*cluster, r, trace->size());
    if (!sizing.empty()) PrintSizing(sizing);
    return 0;
  }
  nlohmann::json j = ResultJson(r);
  j["requests"] = trace->size();
  j["prefill_cells"] = cluster->prefill_cells;
  j["cost_model"] = {{"fixed_ms", cluster->cost.fixed_ms},
                     {"prefill_token_ms", cluster->cost.prefill_token_ms},
                     {"decode_seq_ms", cluster->cost.decode_seq_ms},
                     {"attention_ms", cluster->cost.attention_ms}};
  if (!sizing.empty()) {
    j["sizing"] = nlohmann::json::array();
    for (const frontend::SizingRow& row : sizing) {
      nlohmann::json e = ResultJson(row.result);
      e.erase("cells");
      e["cells"] = row.cells;
      e["prefill_cells"] = row.prefill_cells;
      j["sizing"].push_back(e);
    }
  }
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

}  // namespace

PDSERVE_COMMAND(simulate, "replay a request trace through simulated cells (TTFT/ITL, goodput, sizing)",
                RunSimulate);

}  // namespace pdserve::cli
