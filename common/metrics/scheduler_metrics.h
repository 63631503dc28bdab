// The scheduler process's metric set: queue depth, admissions, rejections by
// reason, cancellations, preemptions, planned tokens. Fed from SchedulerStats
// (one per iteration, computed by the pure policy) and from submission-time
// rejections; the policy itself never touches Prometheus.
#ifndef PDSERVE_COMMON_METRICS_SCHEDULER_METRICS_H_
#define PDSERVE_COMMON_METRICS_SCHEDULER_METRICS_H_

#include <array>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metrics/stats.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace pdserve::metrics {

struct SchedulerMetricsOptions {
  // Also export vllm:num_requests_waiting and vllm:num_requests_running.
  bool vllm_compat = false;
  // `model_name` label of the vLLM-compatible gauges.
  std::string model_name = "pdserve";
};

// Thread-safe (every update is one atomic metric operation).
class SchedulerMetrics {
 public:
  static absl::StatusOr<std::unique_ptr<SchedulerMetrics>> Create(
      std::shared_ptr<prometheus::Registry> registry,
      const SchedulerMetricsOptions& options);

  // Records one iteration: sets the queue gauges, adds the event deltas.
  // Invalid stats (ValidateSchedulerStats) are not recorded.
  absl::Status RecordIteration(const SchedulerStats& stats);

  // A request refused at submission (never entered the queue).
  void RecordRejection(RejectReason reason);

  // Gauges only, for changes between iterations (e.g. a submission queued).
  void SetQueue(int64_t waiting, int64_t running);

  // The engine was lost (counted once per loss).
  void RecordEngineLoss();
  // Requests resumed on an engine again: how many, the tokens they prefill
  // again, and the time since the loss (seconds).
  void RecordRecovery(int64_t resumed, int64_t recomputed_tokens,
                      double seconds);
  // Requests ended because their engine was lost and could not be resumed.
  void RecordUnrecovered(int64_t requests);
  // One KV hand-off import: staged (with its transfer time and bytes) or
  // refused. Any thread.
  void RecordHandoff(bool imported, double seconds, int64_t bytes);

 private:
  explicit SchedulerMetrics(std::shared_ptr<prometheus::Registry> registry);
  void Register(const SchedulerMetricsOptions& options);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Gauge* waiting_ = nullptr;
  prometheus::Gauge* running_ = nullptr;
  prometheus::Gauge* vllm_waiting_ = nullptr;  // null unless vllm_compat
  prometheus::Gauge* vllm_running_ = nullptr;  // null unless vllm_compat
  prometheus::Gauge* vllm_kv_usage_ = nullptr;  // null unless vllm_compat
  prometheus::Counter* admissions_ = nullptr;
  prometheus::Counter* cancellations_ = nullptr;
  prometheus::Counter* preemptions_ = nullptr;
  prometheus::Counter* finished_ = nullptr;
  prometheus::Counter* iterations_ = nullptr;
  prometheus::Counter* planned_prefill_ = nullptr;
  prometheus::Counter* planned_decode_ = nullptr;
  prometheus::Gauge* token_budget_ = nullptr;
  prometheus::Counter* engine_losses_ = nullptr;
  prometheus::Counter* resumed_ = nullptr;
  prometheus::Counter* recomputed_tokens_ = nullptr;
  prometheus::Counter* unrecovered_ = nullptr;
  prometheus::Histogram* recovery_time_ = nullptr;
  prometheus::Counter* handoffs_imported_ = nullptr;
  prometheus::Counter* handoffs_refused_ = nullptr;
  prometheus::Histogram* handoff_time_ = nullptr;
  prometheus::Counter* handoff_bytes_ = nullptr;
  std::array<prometheus::Counter*, 5> rejections_{};  // by RejectReason
};

}  // namespace pdserve::metrics

#endif  // PDSERVE_COMMON_METRICS_SCHEDULER_METRICS_H_
