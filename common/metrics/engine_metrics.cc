#include "common/metrics/engine_metrics.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/metrics/buckets.h"
#include "common/metrics/families.h"

namespace pdserve::metrics {
namespace {

absl::Status CheckPeak(double bytes_per_second, const std::string& source) {
  if (!std::isfinite(bytes_per_second) || bytes_per_second < 0.0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "peak memory bandwidth is %g bytes/s, must be finite and >= 0",
        bytes_per_second));
  }
  if (source != "configured" && source != "probe" &&
      source != "device_probe") {
    return absl::InvalidArgumentError(
        absl::StrCat("peak bandwidth source is '", source,
                     "', must be 'configured', 'probe' or 'device_probe'"));
  }
  return absl::OkStatus();
}

int KindIndex(StepKind kind) { return static_cast<int>(kind); }

}  // namespace

absl::StatusOr<std::unique_ptr<EngineMetrics>> EngineMetrics::Create(
    std::shared_ptr<prometheus::Registry> registry,
    const EngineMetricsOptions& options) {
  if (registry == nullptr) {
    return absl::InvalidArgumentError("EngineMetrics needs a registry");
  }
  if (absl::Status s = CheckPeak(options.peak_bandwidth_bytes_per_second,
                                 options.peak_bandwidth_source);
      !s.ok()) {
    return s;
  }
  if (!std::isfinite(options.peak_flop_per_second) ||
      options.peak_flop_per_second < 0.0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("peak FLOP/s is %g, must be finite and >= 0",
                        options.peak_flop_per_second));
  }
  std::unique_ptr<EngineMetrics> m(new EngineMetrics(std::move(registry)));
  m->Register(options);
  return m;
}

EngineMetrics::EngineMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)) {}

void EngineMetrics::Register(const EngineMetricsOptions& options) {
  using internal::CounterFamily;
  using internal::GaugeFamily;
  using internal::HistogramFamily;
  prometheus::Registry& r = *registry_;
  auto& duration = HistogramFamily(r, kStepDuration);
  auto& batch = HistogramFamily(r, kBatchSize);
  auto& bandwidth = HistogramFamily(r, kBandwidthHistogram);
  for (StepKind kind :
       {StepKind::kPrefill, StepKind::kDecode, StepKind::kMixed}) {
    const prometheus::Labels labels = {
        {"kind", std::string(StepKindName(kind))}};
    PerKind& pk = per_kind_[KindIndex(kind)];
    pk.duration = &duration.Add(labels, StepDurationBuckets());
    pk.batch = &batch.Add(labels, BatchSizeBuckets());
    pk.bandwidth = &bandwidth.Add(labels, BandwidthBuckets());
  }
  auto& tokens = CounterFamily(r, kEngineTokens);
  prefill_tokens_ = &tokens.Add({{"kind", "prefill"}});
  decode_tokens_ = &tokens.Add({{"kind", "decode"}});
  auto& bytes = CounterFamily(r, kMemoryBytes);
  weights_read_ = &bytes.Add({{"kind", "weights_read"}});
  kv_read_ = &bytes.Add({{"kind", "kv_read"}});
  kv_written_ = &bytes.Add({{"kind", "kv_written"}});
  state_bytes_ = &bytes.Add({{"kind", "state"}});
  bandwidth_ = &GaugeFamily(r, kBandwidthGauge).Add({});
  bandwidth_ratio_ = &GaugeFamily(r, kBandwidthRatio).Add({});
  peak_bandwidth_ = options.peak_bandwidth_bytes_per_second;
  peak_family_ = &GaugeFamily(r, kPeakBandwidth);
  peak_gauge_ = &peak_family_->Add({{"source", options.peak_bandwidth_source}});
  peak_gauge_->Set(peak_bandwidth_);
  flops_ = &GaugeFamily(r, kFlopsGauge).Add({});
  flop_total_ = &CounterFamily(r, kFlopTotal).Add({});
  GaugeFamily(r, kPeakFlops).Add({}).Set(options.peak_flop_per_second);

  kv_capacity_tokens_ = &GaugeFamily(r, kKvCapacityTokens).Add({});
  kv_used_tokens_ = &GaugeFamily(r, kKvUsedTokens).Add({});
  kv_free_tokens_ = &GaugeFamily(r, kKvFreeTokens).Add({});
  kv_capacity_pages_ = &GaugeFamily(r, kKvCapacityPages).Add({});
  kv_used_pages_ = &GaugeFamily(r, kKvUsedPages).Add({});
  kv_free_pages_ = &GaugeFamily(r, kKvFreePages).Add({});
  kv_page_size_ = &GaugeFamily(r, kKvPageSize).Add({});
  kv_capacity_bytes_ = &GaugeFamily(r, kKvCapacityBytes).Add({});
  kv_usage_ = &GaugeFamily(r, kKvUsage).Add({});
  active_sequences_ = &GaugeFamily(r, kActiveSequences).Add({});
  max_sequences_ = &GaugeFamily(r, kMaxSequences).Add({});
  preemptions_ = &CounterFamily(r, kEnginePreemptions).Add({});
  prefix_queries_ = &CounterFamily(r, kPrefixQueryTokens).Add({});
  prefix_hits_ = &CounterFamily(r, kPrefixHitTokens).Add({});
  kv_cached_pages_ = &GaugeFamily(r, kKvCachedPages).Add({});
  linear_total_ = &GaugeFamily(r, kLinearSlotsTotal).Add({});
  linear_used_ = &GaugeFamily(r, kLinearSlotsUsed).Add({});
  if (options.vllm_compat) {
    vllm_kv_usage_ =
        &GaugeFamily(r, kVllmKvUsage).Add({{"model_name", options.model_name}});
  }
}

absl::Status EngineMetrics::RecordStep(const StepStats& step) {
  if (absl::Status s = ValidateStepStats(step); !s.ok()) return s;
  const PerKind& pk = per_kind_[KindIndex(step.kind)];
  pk.duration->Observe(step.duration_seconds);
  pk.batch->Observe(static_cast<double>(step.batch_size));
  internal::AddPositive(*prefill_tokens_,
                        static_cast<double>(step.prefill_tokens));
  internal::AddPositive(*decode_tokens_,
                        static_cast<double>(step.decode_tokens));
  internal::AddPositive(*weights_read_,
                        static_cast<double>(step.weight_bytes_read));
  internal::AddPositive(*kv_read_, static_cast<double>(step.kv_bytes_read));
  internal::AddPositive(*kv_written_,
                        static_cast<double>(step.kv_bytes_written));
  internal::AddPositive(*state_bytes_, static_cast<double>(step.state_bytes));
  const double bandwidth = AchievedBandwidth(step);
  bandwidth_->Set(bandwidth);
  pk.bandwidth->Observe(bandwidth);
  {
    std::lock_guard<std::mutex> lock(mu_);
    bandwidth_ratio_->Set(peak_bandwidth_ > 0.0 ? bandwidth / peak_bandwidth_
                                                : 0.0);
  }
  flops_->Set(AchievedFlopsPerSecond(step));
  internal::AddPositive(*flop_total_, step.flops);
  return absl::OkStatus();
}

absl::Status EngineMetrics::RecordPool(const PoolStats& pool) {
  if (absl::Status s = ValidatePoolStats(pool); !s.ok()) return s;
  kv_capacity_tokens_->Set(static_cast<double>(pool.capacity_tokens));
  kv_used_tokens_->Set(static_cast<double>(pool.used_tokens));
  kv_free_tokens_->Set(
      static_cast<double>(pool.capacity_tokens - pool.used_tokens));
  kv_capacity_pages_->Set(static_cast<double>(pool.total_pages));
  kv_used_pages_->Set(static_cast<double>(pool.used_pages));
  kv_free_pages_->Set(static_cast<double>(pool.total_pages - pool.used_pages));
  kv_page_size_->Set(static_cast<double>(pool.page_size_tokens));
  kv_capacity_bytes_->Set(static_cast<double>(pool.capacity_bytes));
  const double usage = PoolUsageFraction(pool);
  kv_usage_->Set(usage);
  if (vllm_kv_usage_ != nullptr) vllm_kv_usage_->Set(usage);
  active_sequences_->Set(static_cast<double>(pool.active_sequences));
  max_sequences_->Set(static_cast<double>(pool.max_sequences));
  linear_total_->Set(static_cast<double>(pool.linear_state_slots_total));
  linear_used_->Set(static_cast<double>(pool.linear_state_slots_used));
  kv_cached_pages_->Set(static_cast<double>(pool.cached_pages));
  std::lock_guard<std::mutex> lock(mu_);
  // Cumulative figures become counter increments (a total that went down
  // means the engine restarted: it counts from 0 again).
  auto add_delta = [](prometheus::Counter& c, int64_t total, int64_t& last) {
    const int64_t delta = total >= last ? total - last : total;
    last = total;
    internal::AddPositive(c, static_cast<double>(delta));
  };
  add_delta(*preemptions_, pool.preemptions_total, last_preemptions_total_);
  add_delta(*prefix_queries_, pool.prefix_query_tokens_total,
            last_prefix_queries_);
  add_delta(*prefix_hits_, pool.prefix_hit_tokens_total, last_prefix_hits_);
  return absl::OkStatus();
}

absl::Status EngineMetrics::SetPeakBandwidth(double bytes_per_second,
                                             const std::string& source) {
  if (absl::Status s = CheckPeak(bytes_per_second, source); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  peak_family_->Remove(peak_gauge_);
  peak_gauge_ = &peak_family_->Add({{"source", source}});
  peak_gauge_->Set(bytes_per_second);
  peak_bandwidth_ = bytes_per_second;
  return absl::OkStatus();
}

double EngineMetrics::bandwidth_utilization_ratio() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bandwidth_ratio_->Value();
}

double EngineMetrics::peak_bandwidth_bytes_per_second() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_bandwidth_;
}

}  // namespace pdserve::metrics
