// The front end process's metric set: requests by gRPC status code and by
// HTTP route and status, per-token
// and per-request latency histograms (TTFT, inter-token, end-to-end, queue,
// prefill, decode), tokens in and out, stream write stalls, tokenizer time.
// Fed from plain values and RequestStats (common/metrics/stats.h).
#ifndef PDSERVE_COMMON_METRICS_FRONTEND_METRICS_H_
#define PDSERVE_COMMON_METRICS_FRONTEND_METRICS_H_

#include <array>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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

enum class TokenizerOp { kEncode, kDecode };

// Thread-safe: every method may be called from any RPC thread.
class FrontendMetrics {
 public:
  static absl::StatusOr<std::unique_ptr<FrontendMetrics>> Create(
      std::shared_ptr<prometheus::Registry> registry);

  // An RPC started: pdserve_frontend_requests_in_flight + 1. Pair every call
  // with exactly one RecordRequest().
  void RecordRequestStart();

  // An RPC finished: counts it by method and code, observes every latency
  // that was measured (>= 0), adds its tokens, in-flight - 1. INVALID_ARGUMENT
  // (nothing recorded, in-flight still decremented) for negative token counts
  // or non-finite latencies.
  absl::Status RecordRequest(const RequestStats& request);

  // Gap between two consecutive streamed tokens of one request, in seconds;
  // `api` "grpc" or "http" (RequestStats::api).
  void ObserveInterTokenLatency(double seconds, absl::string_view api = "grpc");

  // One finished HTTP request: route (one of the served paths, or "other")
  // and status code.
  void RecordHttpRequest(absl::string_view route, int status);

  // One stream write that blocked on the client for `seconds`.
  void RecordStreamWriteStall(double seconds);

  // A stream resubmitted after its scheduler call broke.
  void RecordResubmission();

  // A submission routed to a cell for `reason` (prefix, spilled,
  // least_loaded or none_ready; others are not counted).
  void RecordRoute(absl::string_view reason);

  // Tokenizer work for one request.
  void ObserveTokenizer(TokenizerOp op, double seconds);

 private:
  explicit FrontendMetrics(std::shared_ptr<prometheus::Registry> registry);
  void Register();
  prometheus::Counter& RequestCounter(absl::string_view method, int code);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_ = nullptr;
  prometheus::Gauge* in_flight_ = nullptr;
  // Per API: [0] grpc, [1] http.
  std::array<prometheus::Histogram*, 2> ttft_{}, itl_{}, e2e_{};
  prometheus::Family<prometheus::Counter>* http_requests_ = nullptr;
  prometheus::Histogram* queue_ = nullptr;
  prometheus::Histogram* prefill_ = nullptr;
  prometheus::Histogram* decode_ = nullptr;
  prometheus::Counter* prompt_tokens_ = nullptr;
  prometheus::Counter* generation_tokens_ = nullptr;
  prometheus::Counter* write_stalls_ = nullptr;
  prometheus::Counter* resubmissions_ = nullptr;
  std::array<prometheus::Counter*, 4> routed_{};  // by reason, in kRouteReasons
  prometheus::Histogram* write_stall_time_ = nullptr;
  std::array<prometheus::Histogram*, 2> tokenizer_{};
  // stop, length, cancelled, error, other.
  std::array<prometheus::Counter*, 5> finish_reasons_{};

  std::mutex mu_;  // guards request_counters_
  // Key: method + '/' + code name, or route + ' ' + HTTP status.
  absl::flat_hash_map<std::string, prometheus::Counter*> request_counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve::metrics

#endif  // PDSERVE_COMMON_METRICS_FRONTEND_METRICS_H_
