// One-call wiring of a process's /metrics endpoint and metric set, for the
// process shells (`pdserve engine|scheduler|frontend|serve`). Each Start*
// binds the metrics port, registers the set and returns both; keep the
// returned struct alive for the life of the process.
//
// Command-line flags every serving subcommand should map onto
// ProcessMetricsFlags (the deploy/ manifests use these names):
//   --metrics-host HOST        default 127.0.0.1 (0.0.0.0 in containers)
//   --metrics-port N           default per process; 0 = any free port
//   --vllm-metrics             also export the vllm:* compatibility gauges
//   --model-name NAME          `model_name` label of the vllm:* gauges
//   --peak-memory-bandwidth B  engine: device peak in bytes/s; 0 = measure
//                              at start with the host copy probe
//
// Where each process feeds its set (all calls thread-safe, ~0.1-0.3 us):
//   engine, after every EngineCore::Step (plan entries with num_tokens > 1 or
//   still inside the prompt count as prefill tokens):
//     StepStats s{.kind = ClassifyStep(prefill, decode),
//                 .duration_seconds = result.total_ns * 1e-9,
//                 .prefill_tokens = prefill, .decode_tokens = decode,
//                 .batch_size = plan.size(),
//                 .weight_bytes_read = result.weight_bytes_read,
//                 .kv_bytes_read = result.kv_bytes_read,
//                 .kv_bytes_written = result.kv_bytes_written};
//     handle.metrics->RecordStep(s);   then RecordPool() from Stats().pool
//     (total/used/free pages and tokens, sequences, linear_slots_used) plus
//     Geometry() (page size, capacity bytes, max sequences).
//     handle.server->SetReady(true) once the model is loaded, false on drain.
//   scheduler, after building each plan: RecordIteration(SchedulerStats with
//     the queue lengths and this iteration's admitted / preempted /
//     cancelled / finished counts and planned tokens); on a refused Submit:
//     RecordRejection(reason); SetQueue() when a submission is queued.
//   front end, per Generate RPC: RecordRequestStart() on arrival;
//     ObserveTokenizer() after encoding; ObserveInterTokenLatency() between
//     streamed tokens; RecordStreamWriteStall() when a Write blocked; at the
//     end RecordRequest({.grpc_code, .ttft_seconds (own clock), .e2e_seconds,
//     .queue_seconds = timings.queue_ms / 1e3, .prefill_seconds =
//     (timings.ttft_ms - timings.queue_ms) / 1e3, .decode_seconds =
//     timings.decode_ms / 1e3, token counts, .finish_reason}).
#ifndef PDSERVE_COMMON_METRICS_PROCESS_METRICS_H_
#define PDSERVE_COMMON_METRICS_PROCESS_METRICS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics/engine_metrics.h"
#include "common/metrics/frontend_metrics.h"
#include "common/metrics/metrics_server.h"
#include "common/metrics/scheduler_metrics.h"

namespace pdserve::metrics {

struct ProcessMetricsFlags {
  std::string host = "127.0.0.1";
  int port = 0;
  bool vllm_compat = false;
  std::string model_name = "pdserve";
  // Engine only: bytes/s; 0 = run MeasureHostCopyBandwidth at start.
  double peak_memory_bandwidth = 0.0;
  // Engine only: threads for the copy probe (the engine's thread count).
  int probe_threads = 1;
  // Engine only: copy probe buffer in bytes; 0 = CopyProbeBufferBytes(LLC).
  int64_t probe_buffer_bytes = 0;
  // Engine only: the device's own read-bandwidth probe (bytes/s), set for an
  // engine whose KV and weights live in device memory (CUDA). When set and
  // peak_memory_bandwidth is 0 it gives the peak (source "device_probe")
  // instead of the host copy probe; its error fails StartEngineMetrics.
  std::function<absl::StatusOr<double>()> device_probe;
};

struct EngineMetricsHandle {
  std::unique_ptr<MetricsServer> server;
  std::unique_ptr<EngineMetrics> metrics;
};
struct SchedulerMetricsHandle {
  std::unique_ptr<MetricsServer> server;
  std::unique_ptr<SchedulerMetrics> metrics;
};
struct FrontendMetricsHandle {
  std::unique_ptr<MetricsServer> server;
  std::unique_ptr<FrontendMetrics> metrics;
};

// Starts the engine's endpoint (process="engine"). With no configured peak it
// runs the copy probe first (about 0.3-1 s with the default buffer) and
// labels the peak source "probe". Errors: those of MetricsServer::Start, the
// probe, or EngineMetrics::Create.
absl::StatusOr<EngineMetricsHandle> StartEngineMetrics(
    const ProcessMetricsFlags& flags);

absl::StatusOr<SchedulerMetricsHandle> StartSchedulerMetrics(
    const ProcessMetricsFlags& flags);

absl::StatusOr<FrontendMetricsHandle> StartFrontendMetrics(
    const ProcessMetricsFlags& flags);

}  // namespace pdserve::metrics

#endif  // PDSERVE_COMMON_METRICS_PROCESS_METRICS_H_
