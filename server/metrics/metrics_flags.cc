#include "server/metrics/metrics_flags.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace pdserve::metrics {

void AppendMetricsFlags(std::vector<cli::FlagSpec>& specs, bool engine) {
  specs.push_back({"metrics-port", true,
                   "/metrics port of this process (0 = any free port; none "
                   "when absent)"});
  specs.push_back(
      {"metrics-host", true, "interface for /metrics (default: --host)"});
  specs.push_back({"vllm-metrics", false,
                   "also export vllm:num_requests_waiting/running and "
                   "vllm:kv_cache_usage_perc"});
  if (engine) {
    specs.push_back({"peak-memory-bandwidth", true,
                     "device peak memory bandwidth in bytes/s for the "
                     "utilisation ratio (0 = measure with a copy probe at "
                     "start)"});
  }
}

absl::StatusOr<std::optional<ProcessMetricsFlags>> MetricsFlagsFromArgs(
    const cli::CliArgs& args, const std::string& model_name,
    int probe_threads) {
  if (!args.Has("metrics-port")) return std::nullopt;
  absl::StatusOr<int64_t> port = args.Int("metrics-port", 0);
  if (!port.ok()) return port.status();
  if (*port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-port ", *port, " is outside 0..65535"));
  }
  absl::StatusOr<double> peak = args.Double("peak-memory-bandwidth", 0.0);
  if (!peak.ok()) return peak.status();
  if (!std::isfinite(*peak) || *peak < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--peak-memory-bandwidth ", *peak,
                     " must be a finite number of bytes/s >= 0 (0 = measure)"));
  }
  ProcessMetricsFlags flags;
  flags.host = args.String("metrics-host", args.String("host", "127.0.0.1"));
  flags.port = static_cast<int>(*port);
  flags.vllm_compat = args.Bool("vllm-metrics");
  if (!model_name.empty()) flags.model_name = model_name;
  flags.peak_memory_bandwidth = *peak;
  flags.probe_threads = probe_threads < 1 ? 1 : probe_threads;
  return flags;
}

}  // namespace pdserve::metrics
