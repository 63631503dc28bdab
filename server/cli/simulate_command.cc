// `pdserve simulate --trace FILE`: replays a request trace through the
// scheduler's policy against a linear step-cost model and prints TTFT and
// inter-token latency percentiles and throughput.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "config/tool_options.h"
#include "scheduler/simulator.h"
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

  scheduler::PolicyConfig config;
  config.step_token_budget = o.budget;
  config.prefill_chunk = o.chunk;
  config.max_running = o.max_running;
  config.max_waiting = o.max_queue;
  const scheduler::PoolGeometry pool{o.page_size, o.pages, o.max_seq_len};
  scheduler::StepCostModel cost;
  if (!o.calibration.empty()) {
    auto samples_text = ReadFile(o.calibration);
    if (!samples_text.ok()) return Fail(samples_text.status());
    auto samples = scheduler::ParseStepSamples(*samples_text);
    if (!samples.ok()) return Fail(samples.status());
    auto fit = scheduler::FitStepCost(*samples);
    if (!fit.ok()) return Fail(fit.status());
    cost = *fit;
  }
  if (o.fixed_ms) cost.fixed_ms = *o.fixed_ms;
  if (o.prefill_token_ms) cost.prefill_token_ms = *o.prefill_token_ms;
  if (o.decode_seq_ms) cost.decode_seq_ms = *o.decode_seq_ms;

  scheduler::SimulationResult r =
      scheduler::Simulate(*trace, config, pool, cost, o.itl_slowdown);
  if (o.json) {
    nlohmann::json j = {
        {"requests", trace->size()}, {"completed", r.completed},
        {"rejected", r.rejected}, {"steps", r.steps},
        {"preemptions", r.preemptions}, {"mean_batch", r.mean_batch},
        {"duration_s", r.duration_s},
        {"output_tokens_per_s", r.output_tokens_per_s},
        {"requests_per_s", r.requests_per_s}, {"ttft_ms", ToJson(r.ttft_ms)},
        {"itl_ms", ToJson(r.itl_ms)},
        {"cost_model", {{"fixed_ms", cost.fixed_ms},
                        {"prefill_token_ms", cost.prefill_token_ms},
                        {"decode_seq_ms", cost.decode_seq_ms}}}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("cost model: %.3f ms + %.4f ms/prefill token + %.3f ms/decoding seq\n",
              cost.fixed_ms, cost.prefill_token_ms, cost.decode_seq_ms);
  std::printf("requests %zu  completed %ld  rejected %ld  steps %ld  preemptions %ld  mean batch %.1f\n",
              trace->size(), r.completed, r.rejected, r.steps, r.preemptions,
              r.mean_batch);
  std::printf("%-10s %10s %10s %10s %10s\n", "ms", "p50", "p90", "p99", "mean");
  for (auto [name, p] : {std::pair{"TTFT", r.ttft_ms}, std::pair{"ITL", r.itl_ms}}) {
    std::printf("%-10s %10.2f %10.2f %10.2f %10.2f\n", name, p.p50, p.p90,
                p.p99, p.mean);
  }
  std::printf("throughput %.1f output tok/s, %.2f req/s over %.2f s\n",
              r.output_tokens_per_s, r.requests_per_s, r.duration_s);
  return 0;
}

}  // namespace

PDSERVE_COMMAND(simulate, "replay a request trace through the scheduler policy (TTFT/ITL percentiles)",
                RunSimulate);

}  // namespace pdserve::cli
