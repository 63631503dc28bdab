#include "common/metrics/frontend_metrics.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/metrics/buckets.h"
#include "common/metrics/families.h"

namespace pdserve::metrics {

// The reasons of server/frontend/cell_router.h's RouteReasonName.
constexpr const char* kRouteReasons[] = {"prefix", "spilled", "least_loaded",
                                         "none_ready"};
namespace {

constexpr absl::string_view kFinishReasonNames[] = {
    "stop", "length", "cancelled", "error", "other"};

size_t FinishReasonIndex(absl::string_view reason) {
  for (size_t i = 0; i + 1 < std::size(kFinishReasonNames); ++i) {
    if (reason == kFinishReasonNames[i]) return i;
  }
  return std::size(kFinishReasonNames) - 1;
}

size_t ApiIndex(absl::string_view api) { return api == "http" ? 1 : 0; }

void ObserveIfMeasured(prometheus::Histogram& histogram, double seconds) {
  if (seconds >= 0.0) histogram.Observe(seconds);
}

absl::Status ValidateRequest(const RequestStats& r) {
  for (const auto& [name, value] :
       {std::pair<absl::string_view, double>{"ttft_seconds", r.ttft_seconds},
        {"e2e_seconds", r.e2e_seconds},
        {"queue_seconds", r.queue_seconds},
        {"prefill_seconds", r.prefill_seconds},
        {"decode_seconds", r.decode_seconds}}) {
    if (!std::isfinite(value)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "request %s is %g, must be finite", std::string(name), value));
    }
  }
  if (r.prompt_tokens < 0 || r.generated_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("request token counts must be >= 0, got prompt ",
                     r.prompt_tokens, " generated ", r.generated_tokens));
  }
  if (r.method.empty()) {
    return absl::InvalidArgumentError("request method name is empty");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<FrontendMetrics>> FrontendMetrics::Create(
    std::shared_ptr<prometheus::Registry> registry) {
  if (registry == nullptr) {
    return absl::InvalidArgumentError("FrontendMetrics needs a registry");
  }
  std::unique_ptr<FrontendMetrics> m(new FrontendMetrics(std::move(registry)));
  m->Register();
  return m;
}

FrontendMetrics::FrontendMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)) {}

void FrontendMetrics::Register() {
  using internal::CounterFamily;
  using internal::GaugeFamily;
  using internal::HistogramFamily;
  prometheus::Registry& r = *registry_;
  requests_ = &CounterFamily(r, kRequests);
  // Every code of the main RPC exists from the start, so error-ratio queries
  // see zeros instead of missing series.
  for (int code = 0; code <= 16; ++code) RequestCounter("Generate", code);
  in_flight_ = &GaugeFamily(r, kInFlight).Add({});
  for (size_t i = 0; i < 2; ++i) {
    const prometheus::Labels api = {{"api", i == 0 ? "grpc" : "http"}};
    ttft_[i] = &HistogramFamily(r, kTtft).Add(api, RequestLatencyBuckets());
    itl_[i] = &HistogramFamily(r, kItl).Add(api, TokenLatencyBuckets());
    e2e_[i] = &HistogramFamily(r, kE2e).Add(api, RequestLatencyBuckets());
  }
  http_requests_ = &CounterFamily(r, kHttpRequests);
  // The main routes' successes exist from the start (zeros, not absent).
  for (const char* route :
       {"/v1/chat/completions", "/v1/completions", "/v1/messages"}) {
    request_counters_.emplace(
        absl::StrCat(route, " 200"),
        &http_requests_->Add({{"route", route}, {"code", "200"}}));
  }
  queue_ = &HistogramFamily(r, kQueueTime).Add({}, RequestLatencyBuckets());
  prefill_ = &HistogramFamily(r, kPrefillTime).Add({}, RequestLatencyBuckets());
  decode_ = &HistogramFamily(r, kDecodeTime).Add({}, RequestLatencyBuckets());
  prompt_tokens_ = &CounterFamily(r, kPromptTokens).Add({});
  generation_tokens_ = &CounterFamily(r, kGenerationTokens).Add({});
  write_stalls_ = &CounterFamily(r, kWriteStalls).Add({});
  resubmissions_ = &CounterFamily(r, kResubmissions).Add({});
  auto& routed = CounterFamily(r, kRouted);
  for (size_t i = 0; i < routed_.size(); ++i) {
    routed_[i] = &routed.Add({{"reason", kRouteReasons[i]}});
  }
  write_stall_time_ =
      &HistogramFamily(r, kWriteStallTime).Add({}, TokenLatencyBuckets());
  auto& tokenizer = HistogramFamily(r, kTokenizerTime);
  tokenizer_[0] = &tokenizer.Add({{"op", "encode"}}, TokenizerBuckets());
  tokenizer_[1] = &tokenizer.Add({{"op", "decode"}}, TokenizerBuckets());
  auto& finish = CounterFamily(r, kFinishReasons);
  for (size_t i = 0; i < finish_reasons_.size(); ++i) {
    finish_reasons_[i] =
        &finish.Add({{"reason", std::string(kFinishReasonNames[i])}});
  }
}

prometheus::Counter& FrontendMetrics::RequestCounter(absl::string_view method,
                                                     int code) {
  const absl::string_view code_name = GrpcCodeName(code);
  std::string key = absl::StrCat(method, "/", code_name);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = request_counters_.find(key);
  if (it != request_counters_.end()) return *it->second;
  prometheus::Counter& counter = requests_->Add(
      {{"method", std::string(method)}, {"code", std::string(code_name)}});
  request_counters_.emplace(std::move(key), &counter);
  return counter;
}

void FrontendMetrics::RecordRequestStart() { in_flight_->Increment(); }

absl::Status FrontendMetrics::RecordRequest(const RequestStats& request) {
  in_flight_->Decrement();
  if (absl::Status s = ValidateRequest(request); !s.ok()) return s;
  const size_t api = ApiIndex(request.api);
  if (api == 0) RequestCounter(request.method, request.grpc_code).Increment();
  ObserveIfMeasured(*ttft_[api], request.ttft_seconds);
  ObserveIfMeasured(*e2e_[api], request.e2e_seconds);
  ObserveIfMeasured(*queue_, request.queue_seconds);
  ObserveIfMeasured(*prefill_, request.prefill_seconds);
  ObserveIfMeasured(*decode_, request.decode_seconds);
  internal::AddPositive(*prompt_tokens_,
                        static_cast<double>(request.prompt_tokens));
  internal::AddPositive(*generation_tokens_,
                        static_cast<double>(request.generated_tokens));
  if (!request.finish_reason.empty()) {
    finish_reasons_[FinishReasonIndex(request.finish_reason)]->Increment();
  }
  return absl::OkStatus();
}

void FrontendMetrics::ObserveInterTokenLatency(double seconds,
                                               absl::string_view api) {
  if (seconds >= 0.0 && std::isfinite(seconds)) {
    itl_[ApiIndex(api)]->Observe(seconds);
  }
}

void FrontendMetrics::RecordHttpRequest(absl::string_view route, int status) {
  std::string key = absl::StrCat(route, " ", status);
  prometheus::Counter* counter;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = request_counters_.find(key);
    if (it == request_counters_.end()) {
      counter = &http_requests_->Add(
          {{"route", std::string(route)}, {"code", absl::StrCat(status)}});
      request_counters_.emplace(std::move(key), counter);
    } else {
      counter = it->second;
    }
  }
  counter->Increment();
}

void FrontendMetrics::RecordStreamWriteStall(double seconds) {
  write_stalls_->Increment();
  if (seconds >= 0.0 && std::isfinite(seconds)) {
    write_stall_time_->Observe(seconds);
  }
}

void FrontendMetrics::RecordResubmission() { resubmissions_->Increment(); }

void FrontendMetrics::RecordRoute(absl::string_view reason) {
  for (size_t i = 0; i < routed_.size(); ++i) {
    if (reason == kRouteReasons[i]) routed_[i]->Increment();
  }
}

void FrontendMetrics::ObserveTokenizer(TokenizerOp op, double seconds) {
  if (seconds >= 0.0 && std::isfinite(seconds)) {
    tokenizer_[op == TokenizerOp::kEncode ? 0 : 1]->Observe(seconds);
  }
}

}  // namespace pdserve::metrics
