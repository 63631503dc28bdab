#include "common/metrics/metrics_flags.h"

namespace pdserve::metrics {

std::optional<ProcessMetricsFlags> MetricsFlagsFromOptions(
    const config::MetricsOptions& options, const std::string& process_host,
    const std::string& model_name, int probe_threads) {
  if (!options.port.has_value()) return std::nullopt;
  ProcessMetricsFlags flags;
  flags.host = options.host.empty() ? process_host : options.host;
  flags.port = static_cast<int>(*options.port);
  flags.vllm_compat = options.vllm_compat;
  if (!model_name.empty()) flags.model_name = model_name;
  flags.peak_memory_bandwidth = options.peak_memory_bandwidth;
  flags.probe_threads = probe_threads < 1 ? 1 : probe_threads;
  return flags;
}

}  // namespace pdserve::metrics
