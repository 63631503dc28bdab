// The engine process's metric set: step timings, achieved memory bandwidth and
// FLOP/s, KV pool occupancy. Fed from the plain StepStats / PoolStats structs
// (common/metrics/stats.h) that the engine core computes; the core itself
// never touches Prometheus.
#ifndef PDSERVE_COMMON_METRICS_ENGINE_METRICS_H_
#define PDSERVE_COMMON_METRICS_ENGINE_METRICS_H_

#include <array>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metrics/stats.h"

namespace prometheus {
template <typename T>
class Family;
class Counter;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace pdserve::metrics {

struct EngineMetricsOptions {
  // Device peak memory bandwidth in bytes/s, the denominator of
  // pdserve_engine_memory_bandwidth_utilization_ratio. 0 = unknown (the ratio
  // stays 0). Set it from configuration or from MeasureHostCopyBandwidth().
  double peak_bandwidth_bytes_per_second = 0.0;
  // `source` label of the peak: "configured", "probe" (host copy probe) or
  // "device_probe" (the backend's device read sweep).
  std::string peak_bandwidth_source = "configured";
  // Device peak FLOP/s, exported as is (0 = not configured).
  double peak_flop_per_second = 0.0;
  // Also export vllm:kv_cache_usage_perc.
  bool vllm_compat = false;
  // `model_name` label of the vLLM-compatible gauge.
  std::string model_name = "pdserve";
};

// Thread-safe: RecordStep and RecordPool may be called from any thread.
// Registered metrics live in the registry, which this object keeps alive.
class EngineMetrics {
 public:
  // INVALID_ARGUMENT for a negative or non-finite peak, or a source other
  // than "configured" / "probe".
  static absl::StatusOr<std::unique_ptr<EngineMetrics>> Create(
      std::shared_ptr<prometheus::Registry> registry,
      const EngineMetricsOptions& options);

  // Records one step. Invalid stats (see ValidateStepStats) are not recorded
  // and come back as INVALID_ARGUMENT.
  absl::Status RecordStep(const StepStats& step);

  // Records a pool snapshot; preemptions are turned into counter increments
  // from the cumulative total (a total that went down, i.e. a restarted pool,
  // counts from zero again). Invalid stats are not recorded.
  absl::Status RecordPool(const PoolStats& pool);

  // Replaces the peak (e.g. after a probe finished). Same checks as Create.
  absl::Status SetPeakBandwidth(double bytes_per_second,
                                const std::string& source);

  double peak_bandwidth_bytes_per_second() const;
  // The last step's bandwidth / the peak (the exported ratio; 0 before any
  // step or without a peak).
  double bandwidth_utilization_ratio() const;

 private:
  struct PerKind {
    prometheus::Histogram* duration = nullptr;
    prometheus::Histogram* batch = nullptr;
    prometheus::Histogram* bandwidth = nullptr;
  };

  explicit EngineMetrics(std::shared_ptr<prometheus::Registry> registry);
  void Register(const EngineMetricsOptions& options);

  std::shared_ptr<prometheus::Registry> registry_;
  std::array<PerKind, 3> per_kind_;
  prometheus::Counter* prefill_tokens_ = nullptr;
  prometheus::Counter* decode_tokens_ = nullptr;
  prometheus::Counter* weights_read_ = nullptr;
  prometheus::Counter* kv_read_ = nullptr;
  prometheus::Counter* kv_written_ = nullptr;
  prometheus::Counter* state_bytes_ = nullptr;
  prometheus::Gauge* bandwidth_ = nullptr;
  prometheus::Gauge* bandwidth_ratio_ = nullptr;
  prometheus::Gauge* flops_ = nullptr;
  prometheus::Counter* flop_total_ = nullptr;

  prometheus::Gauge* kv_capacity_tokens_ = nullptr;
  prometheus::Gauge* kv_used_tokens_ = nullptr;
  prometheus::Gauge* kv_free_tokens_ = nullptr;
  prometheus::Gauge* kv_capacity_pages_ = nullptr;
  prometheus::Gauge* kv_used_pages_ = nullptr;
  prometheus::Gauge* kv_free_pages_ = nullptr;
  prometheus::Gauge* kv_page_size_ = nullptr;
  prometheus::Gauge* kv_capacity_bytes_ = nullptr;
  prometheus::Gauge* kv_usage_ = nullptr;
  prometheus::Gauge* active_sequences_ = nullptr;
  prometheus::Gauge* max_sequences_ = nullptr;
  prometheus::Counter* preemptions_ = nullptr;
  prometheus::Counter* prefix_queries_ = nullptr;
  prometheus::Counter* prefix_hits_ = nullptr;
  prometheus::Gauge* kv_cached_pages_ = nullptr;
  prometheus::Gauge* linear_total_ = nullptr;
  prometheus::Gauge* linear_used_ = nullptr;
  prometheus::Gauge* vllm_kv_usage_ = nullptr;  // null unless vllm_compat

  mutable std::mutex mu_;  // guards the fields below
  double peak_bandwidth_ ABSL_GUARDED_BY(mu_) = 0.0;
  prometheus::Family<prometheus::Gauge>* peak_family_ ABSL_GUARDED_BY(mu_) = nullptr;
  prometheus::Gauge* peak_gauge_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t last_preemptions_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_prefix_queries_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_prefix_hits_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pdserve::metrics

#endif  // PDSERVE_COMMON_METRICS_ENGINE_METRICS_H_
