#include "common/metrics/process_metrics.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/metrics/bandwidth_probe.h"

namespace pdserve::metrics {
namespace {

absl::StatusOr<std::unique_ptr<MetricsServer>> StartServer(
    const ProcessMetricsFlags& flags, const std::string& process) {
  MetricsServerOptions options;
  options.host = flags.host;
  options.port = flags.port;
  options.process = process;
  return MetricsServer::Start(options);
}

}  // namespace

absl::StatusOr<EngineMetricsHandle> StartEngineMetrics(
    const ProcessMetricsFlags& flags) {
  EngineMetricsOptions options;
  options.vllm_compat = flags.vllm_compat;
  options.model_name = flags.model_name;
  options.peak_bandwidth_bytes_per_second = flags.peak_memory_bandwidth;
  options.peak_bandwidth_source = "configured";
  if (flags.peak_memory_bandwidth <= 0.0 && flags.device_probe) {
    absl::StatusOr<double> measured = flags.device_probe();
    if (!measured.ok()) {
      return absl::Status(
          measured.status().code(),
          absl::StrCat("measuring the device's read bandwidth (or set "
                       "--peak-memory-bandwidth): ",
                       measured.status().message()));
    }
    options.peak_bandwidth_bytes_per_second = *measured;
    options.peak_bandwidth_source = "device_probe";
  } else if (flags.peak_memory_bandwidth <= 0.0) {
    CopyProbeOptions probe;
    probe.threads = flags.probe_threads < 1 ? 1 : flags.probe_threads;
    probe.buffer_bytes = flags.probe_buffer_bytes;
    absl::StatusOr<CopyProbeResult> measured = MeasureHostCopyBandwidth(probe);
    if (!measured.ok()) return measured.status();
    options.peak_bandwidth_bytes_per_second = measured->bytes_per_second;
    options.peak_bandwidth_source = "probe";
  }
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      StartServer(flags, "engine");
  if (!server.ok()) return server.status();
  absl::StatusOr<std::unique_ptr<EngineMetrics>> metrics =
      EngineMetrics::Create((*server)->registry(), options);
  if (!metrics.ok()) return metrics.status();
  return EngineMetricsHandle{std::move(*server), std::move(*metrics)};
}

absl::StatusOr<SchedulerMetricsHandle> StartSchedulerMetrics(
    const ProcessMetricsFlags& flags) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      StartServer(flags, "scheduler");
  if (!server.ok()) return server.status();
  absl::StatusOr<std::unique_ptr<SchedulerMetrics>> metrics =
      SchedulerMetrics::Create(
          (*server)->registry(),
          {.vllm_compat = flags.vllm_compat, .model_name = flags.model_name});
  if (!metrics.ok()) return metrics.status();
  return SchedulerMetricsHandle{std::move(*server), std::move(*metrics)};
}

absl::StatusOr<FrontendMetricsHandle> StartFrontendMetrics(
    const ProcessMetricsFlags& flags) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      StartServer(flags, "frontend");
  if (!server.ok()) return server.status();
  absl::StatusOr<std::unique_ptr<FrontendMetrics>> metrics =
      FrontendMetrics::Create((*server)->registry());
  if (!metrics.ok()) return metrics.status();
  return FrontendMetricsHandle{std::move(*server), std::move(*metrics)};
}

}  // namespace pdserve::metrics
