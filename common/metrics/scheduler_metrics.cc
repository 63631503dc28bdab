#include "common/metrics/scheduler_metrics.h"

#include <utility>

#include "common/metrics/buckets.h"
#include "common/metrics/families.h"

namespace pdserve::metrics {

absl::StatusOr<std::unique_ptr<SchedulerMetrics>> SchedulerMetrics::Create(
    std::shared_ptr<prometheus::Registry> registry,
    const SchedulerMetricsOptions& options) {
  if (registry == nullptr) {
    return absl::InvalidArgumentError("SchedulerMetrics needs a registry");
  }
  std::unique_ptr<SchedulerMetrics> m(
      new SchedulerMetrics(std::move(registry)));
  m->Register(options);
  return m;
}

SchedulerMetrics::SchedulerMetrics(
    std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)) {}

void SchedulerMetrics::Register(const SchedulerMetricsOptions& options) {
  using internal::CounterFamily;
  using internal::GaugeFamily;
  prometheus::Registry& r = *registry_;
  waiting_ = &GaugeFamily(r, kWaiting).Add({});
  running_ = &GaugeFamily(r, kRunning).Add({});
  if (options.vllm_compat) {
    const prometheus::Labels labels = {{"model_name", options.model_name}};
    vllm_waiting_ = &GaugeFamily(r, kVllmWaiting).Add(labels);
    vllm_running_ = &GaugeFamily(r, kVllmRunning).Add(labels);
    vllm_kv_usage_ = &GaugeFamily(r, kVllmKvUsage).Add(labels);
  }
  admissions_ = &CounterFamily(r, kAdmissions).Add({});
  cancellations_ = &CounterFamily(r, kCancellations).Add({});
  preemptions_ = &CounterFamily(r, kSchedPreemptions).Add({});
  finished_ = &CounterFamily(r, kFinished).Add({});
  iterations_ = &CounterFamily(r, kIterations).Add({});
  auto& planned = CounterFamily(r, kPlannedTokens);
  planned_prefill_ = &planned.Add({{"kind", "prefill"}});
  planned_decode_ = &planned.Add({{"kind", "decode"}});
  token_budget_ = &GaugeFamily(r, kTokenBudget).Add({});
  engine_losses_ = &CounterFamily(r, kEngineLosses).Add({});
  resumed_ = &CounterFamily(r, kResumedRequests).Add({});
  recomputed_tokens_ = &CounterFamily(r, kRecomputedTokens).Add({});
  unrecovered_ = &CounterFamily(r, kUnrecovered).Add({});
  recovery_time_ = &internal::HistogramFamily(r, kRecoveryTime)
                        .Add({}, RequestLatencyBuckets());
  auto& handoffs = CounterFamily(r, kHandoffs);
  handoffs_imported_ = &handoffs.Add({{"outcome", "imported"}});
  handoffs_refused_ = &handoffs.Add({{"outcome", "refused"}});
  handoff_time_ = &internal::HistogramFamily(r, kHandoffTime)
                       .Add({}, StepDurationBuckets());
  handoff_bytes_ = &CounterFamily(r, kHandoffBytes).Add({});
  auto& rejections = CounterFamily(r, kRejections);
  for (RejectReason reason :
       {RejectReason::kQueueFull, RejectReason::kPromptTooLong,
        RejectReason::kPoolTooSmall, RejectReason::kInvalidArgument,
        RejectReason::kDraining}) {
    rejections_[static_cast<size_t>(reason)] =
        &rejections.Add({{"reason", std::string(RejectReasonName(reason))}});
  }
}

void SchedulerMetrics::SetQueue(int64_t waiting, int64_t running) {
  waiting_->Set(static_cast<double>(waiting));
  running_->Set(static_cast<double>(running));
  if (vllm_waiting_ != nullptr) {
    vllm_waiting_->Set(static_cast<double>(waiting));
    vllm_running_->Set(static_cast<double>(running));
  }
}

absl::Status SchedulerMetrics::RecordIteration(const SchedulerStats& stats) {
  if (absl::Status s = ValidateSchedulerStats(stats); !s.ok()) return s;
  SetQueue(stats.waiting_requests, stats.running_requests);
  if (vllm_kv_usage_ != nullptr && stats.kv_total_pages > 0) {
    vllm_kv_usage_->Set(
        static_cast<double>(stats.kv_total_pages - stats.kv_free_pages) /
        static_cast<double>(stats.kv_total_pages));
  }
  internal::AddPositive(*admissions_, static_cast<double>(stats.admitted));
  internal::AddPositive(*cancellations_, static_cast<double>(stats.cancelled));
  internal::AddPositive(*preemptions_, static_cast<double>(stats.preempted));
  internal::AddPositive(*finished_, static_cast<double>(stats.finished));
  iterations_->Increment();
  internal::AddPositive(*planned_prefill_,
                        static_cast<double>(stats.planned_prefill_tokens));
  internal::AddPositive(*planned_decode_,
                        static_cast<double>(stats.planned_decode_tokens));
  if (stats.token_budget > 0) {
    token_budget_->Set(static_cast<double>(stats.token_budget));
  }
  return absl::OkStatus();
}

void SchedulerMetrics::RecordEngineLoss() { engine_losses_->Increment(); }

void SchedulerMetrics::RecordRecovery(int64_t resumed,
                                      int64_t recomputed_tokens,
                                      double seconds) {
  internal::AddPositive(*resumed_, static_cast<double>(resumed));
  internal::AddPositive(*recomputed_tokens_,
                        static_cast<double>(recomputed_tokens));
  if (seconds >= 0) recovery_time_->Observe(seconds);
}

void SchedulerMetrics::RecordUnrecovered(int64_t requests) {
  internal::AddPositive(*unrecovered_, static_cast<double>(requests));
}

void SchedulerMetrics::RecordHandoff(bool imported, double seconds,
                                     int64_t bytes) {
  if (!imported) {
    handoffs_refused_->Increment();
    return;
  }
  handoffs_imported_->Increment();
  handoff_time_->Observe(seconds);
  internal::AddPositive(*handoff_bytes_, static_cast<double>(bytes));
}

void SchedulerMetrics::RecordRejection(RejectReason reason) {
  const size_t i = static_cast<size_t>(reason);
  if (i < rejections_.size()) rejections_[i]->Increment();
}

}  // namespace pdserve::metrics
