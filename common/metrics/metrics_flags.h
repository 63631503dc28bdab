// The /metrics endpoint of `pdserve engine|scheduler|frontend`: maps the
// metrics rows of their flag tables (config::MetricsOptions: --metrics-port,
// --metrics-host, --vllm-metrics, --peak-memory-bandwidth; validated there)
// onto ProcessMetricsFlags (process_metrics.h).
#ifndef PDSERVE_COMMON_METRICS_METRICS_FLAGS_H_
#define PDSERVE_COMMON_METRICS_METRICS_FLAGS_H_

#include <optional>
#include <string>

#include "common/metrics/process_metrics.h"
#include "config/process_options.h"

namespace pdserve::metrics {

// The ProcessMetricsFlags the options ask for, or nullopt without
// --metrics-port. The host is --metrics-host, else `process_host` (the
// process's --host); `model_name` becomes the vllm:* `model_name` label
// (empty: the default "pdserve"); `probe_threads` (< 1 taken as 1) runs the
// engine's copy probe.
std::optional<ProcessMetricsFlags> MetricsFlagsFromOptions(
    const config::MetricsOptions& options, const std::string& process_host,
    const std::string& model_name, int probe_threads = 1);

}  // namespace pdserve::metrics

#endif  // PDSERVE_COMMON_METRICS_METRICS_FLAGS_H_
