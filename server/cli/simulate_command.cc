// `pdserve simulate --trace FILE`: replays a request trace through the
// scheduler's policy against a linear step-cost model and prints TTFT and
// inter-token latency percentiles and throughput.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "config/cli_args.h"
#include "scheduler/simulator.h"
#include "server/cli/command.h"

namespace pdserve::cli {
namespace {

const std::vector<FlagSpec>& Flags() {
  static const auto* flags = new std::vector<FlagSpec>{
      {"trace", true, "trace file: CSV arrival_s,prompt_tokens,output_tokens[,priority] or JSON"},
      {"budget", true, "per-step token budget (default 512)"},
      {"chunk", true, "prefill chunk size, 0 = chunking off (default 256)"},
      {"max-running", true, "most sequences running at once (default 64)"},
      {"max-queue", true, "waiting queue bound (default 1024)"},
      {"page-size", true, "KV page size in tokens (default 16)"},
      {"pages", true, "KV pages in the pool (default 8192)"},
      {"max-seq-len", true, "sequence capacity in tokens (default 4096)"},
      {"fixed-ms", true, "step cost: fixed milliseconds (default 2)"},
      {"prefill-token-ms", true, "step cost: ms per prefill token (default 0.05)"},
      {"decode-seq-ms", true, "step cost: ms per decoding sequence (default 0.5)"},
      {"itl-slowdown", true, "adaptive budget as in serve: a step with prefill costs at most X times a decode-only step (default 1.5; 0 = fixed budget)"},
      {"calibration", true, "CSV prefill_tokens,decode_seqs,step_ms of measured engine steps: fits the cost model"},
      {"json", false, "print the result as JSON"},
  };
  return *flags;
}

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
  auto args = CliArgs::Parse(argc, argv, Flags());
  if (!args.ok()) return Fail(args.status());
  if (args->help() || !args->Has("trace")) {
    std::fprintf(args->help() ? stdout : stderr,
                 "usage: pdserve simulate --trace FILE [options]\n%s",
                 CliArgs::Usage(Flags()).c_str());
    return args->help() ? 0 : 2;
  }
  auto text = ReadFile(args->String("trace", ""));
  if (!text.ok()) return Fail(text.status());
  auto trace = scheduler::ParseTrace(*text);
  if (!trace.ok()) return Fail(trace.status());

  scheduler::PolicyConfig config;
  scheduler::PoolGeometry pool{16, 8192, 4096};
  scheduler::StepCostModel cost;
  struct IntFlag { const char* name; int64_t* out; };
  for (IntFlag f : {IntFlag{"budget", &config.step_token_budget},
                    IntFlag{"chunk", &config.prefill_chunk},
                    IntFlag{"max-running", &config.max_running},
                    IntFlag{"max-queue", &config.max_waiting},
                    IntFlag{"page-size", &pool.page_size},
                    IntFlag{"pages", &pool.total_pages},
                    IntFlag{"max-seq-len", &pool.max_seq_len}}) {
    auto v = args->Int(f.name, *f.out);
    if (!v.ok()) return Fail(v.status());
    if (*v < 0 || (*v == 0 && std::string(f.name) != "chunk")) {
      return Fail(absl::InvalidArgumentError(
          absl::StrFormat("--%s %d must be > 0", f.name, *v)));
    }
    *f.out = *v;
  }
  if (args->Has("calibration")) {
    auto samples_text = ReadFile(args->String("calibration", ""));
    if (!samples_text.ok()) return Fail(samples_text.status());
    auto samples = scheduler::ParseStepSamples(*samples_text);
    if (!samples.ok()) return Fail(samples.status());
    auto fit = scheduler::FitStepCost(*samples);
    if (!fit.ok()) return Fail(fit.status());
    cost = *fit;
  }
  for (auto [name, out] : {std::pair{"fixed-ms", &cost.fixed_ms},
                           std::pair{"prefill-token-ms", &cost.prefill_token_ms},
                           std::pair{"decode-seq-ms", &cost.decode_seq_ms}}) {
    auto v = args->Double(name, *out);
    if (!v.ok()) return Fail(v.status());
    *out = *v;
  }

  auto slowdown = args->Double("itl-slowdown", 1.5);
  if (!slowdown.ok()) return Fail(slowdown.status());
  if (*slowdown < 0) {
    return Fail(absl::InvalidArgumentError(
        absl::StrFormat("--itl-slowdown %g must be >= 0", *slowdown)));
  }
  scheduler::SimulationResult r =
      scheduler::Simulate(*trace, config, pool, cost, *slowdown);
  if (args->Bool("json")) {
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
