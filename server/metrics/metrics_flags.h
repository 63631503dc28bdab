// The /metrics command-line flags shared by `pdserve engine|scheduler|
// frontend` and their mapping onto ProcessMetricsFlags (process_metrics.h).
// The deploy/ manifests and `pdserve serve` use these names:
//   --metrics-port N            serve /metrics on N (0 = any free port);
//                               absent = this process serves no /metrics
//   --metrics-host HOST         interface for /metrics (default: --host)
//   --vllm-metrics              also export the vllm:* compatibility gauges
//   --peak-memory-bandwidth B   engine only: device peak in bytes/s;
//                               0 (default) = measure with the copy probe
#ifndef PDSERVE_SERVER_METRICS_METRICS_FLAGS_H_
#define PDSERVE_SERVER_METRICS_METRICS_FLAGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/cli_args.h"
#include "server/metrics/process_metrics.h"

namespace pdserve::metrics {

// Appends the flags above to a subcommand's flag list; `engine` adds
// --peak-memory-bandwidth.
void AppendMetricsFlags(std::vector<cli::FlagSpec>& specs, bool engine);

// The ProcessMetricsFlags the command line asks for, or nullopt when
// --metrics-port is absent. `model_name` becomes the vllm:* `model_name`
// label; `probe_threads` the copy probe's threads (engine). INVALID_ARGUMENT
// naming the flag and value for a port outside 0..65535, a non-numeric value
// or a negative or non-finite peak bandwidth.
absl::StatusOr<std::optional<ProcessMetricsFlags>> MetricsFlagsFromArgs(
    const cli::CliArgs& args, const std::string& model_name,
    int probe_threads = 1);

}  // namespace pdserve::metrics

#endif  // PDSERVE_SERVER_METRICS_METRICS_FLAGS_H_
