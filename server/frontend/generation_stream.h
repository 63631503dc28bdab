// One generation, shared by the public APIs (pdserve.v1 gRPC and the
// OpenAI / Anthropic HTTP API): submits a prepared request to the scheduler,
// turns its token events into text deltas (incremental UTF-8-safe
// detokenizer, stop strings), ends with one Final, and cancels the scheduler
// request when the client goes away. When the scheduler call breaks in
// transport (the scheduler died) the stream resubmits the request, under
// the same scheduler id, with the tokens it already has, and carries on
// where it was: its client sees a pause. Callback API: no thread per stream.
#ifndef PDSERVE_SERVER_FRONTEND_GENERATION_STREAM_H_
#define PDSERVE_SERVER_FRONTEND_GENERATION_STREAM_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "pdserve/v1/api.pb.h"
#include "pdserve/v1/scheduler.grpc.pb.h"
#include "server/chat/output_parser.h"
#include "server/frontend/cell_router.h"
#include "server/frontend/request_prep.h"
#include "common/metrics/frontend_metrics.h"
#include "server/tokenizer/detokenizer.h"

namespace pdserve::frontend {

// Receives one GenerationStream's output. Calls come from gRPC threads, in
// order and never overlapping; OnDone is the last call, exactly once.
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  // The first token arrived (the prompt is computed and in the prefix
  // cache). Before the OnDelta that carries it.
  virtual void OnFirstToken() {}
  // Text (whole UTF-8 characters: the answer), reasoning text, tool-call
  // pieces and, as the request asked, token ids, logprobs and top
  // alternatives since the previous delta. Never empty.
  virtual void OnDelta(v1::Delta delta) = 0;
  // `status` OK: `final` holds the finish reason (STOP, LENGTH, TOOL_CALLS
  // when the reply's tool calls ended it), the usage
  // (cached prompt tokens included), timings and the stop string that
  // matched. Otherwise the request failed or was cancelled (CANCELLED) and
  // `final` holds the usage so far.
  virtual void OnDone(const grpc::Status& status, const v1::Final& final) = 0;
};

// What every stream of a front end shares; all pointers must outlive the
// streams. `metrics` may be null.
struct GenerationContext {
  const ModelContext* model = nullptr;
  // The cells (schedulers) a request may go to; each Submit (the first and
  // every resubmission) picks one (cell_router.h).
  CellRouter* cells = nullptr;
  metrics::FrontendMetrics* metrics = nullptr;
  // How long a stream whose scheduler call broke keeps resubmitting (to the
  // restarted scheduler, or whatever answers at the address) before it
  // ends UNAVAILABLE; 0 = at once (--scheduler-recovery-seconds).
  std::chrono::milliseconds scheduler_recovery{30000};
  // Prefill/decode disaggregation: while a prefill cell and a decode cell
  // are ready, a prompt of at least this many tokens is prefilled on the
  // prefill cell (its first token streams from there), then continued on a
  // decode cell from its KV (--pd-min-prompt-tokens).
  int64_t pd_min_prompt_tokens = 256;
};

// Thread-safe. Keeps itself alive until the scheduler call is done; callers
// hold it only to Cancel. Metrics: observes inter-token latency and
// tokenizer decode time as they happen (labelled by `api`); Stats() gives
// the rest for the caller's RecordRequest once the sink had OnDone.
class GenerationStream {
 public:
  using Clock = std::chrono::steady_clock;

  // Submits `prepared` (PrepareRequest(req)) as `request_id`. `start` is
  // when the API received the request (for TTFT).
  static std::shared_ptr<GenerationStream> Start(
      const GenerationContext& context, const v1::GenerateRequest& req,
      const PreparedRequest& prepared, const std::string& request_id,
      std::shared_ptr<GenerationSink> sink, absl::string_view api,
      Clock::time_point start);

  // The client went away: cancels the scheduler request (its capacity is
  // freed at the next step); the sink then gets OnDone(CANCELLED). Any
  // thread, any number of times, also after the end.
  void Cancel();

  // Ends every open stream of this process with `status` (the drain time
  // ran out): their scheduler requests are cancelled and each sink gets
  // OnDone(status). Any thread.
  static void AbortAll(const grpc::Status& status);

  // Moves every open stream now on cell `target` (a scheduler address) to
  // whichever cell the router picks: its call there is cancelled and the
  // request resubmitted with the tokens received so far (resume by
  // recompute). For a cell whose engine was lost while others serve.
  // Returns how many streams moved. Any thread.
  static int MoveOffCell(const std::string& target);

  // Timings and counts measured so far (method, code and e2e are the
  // caller's to fill).
  metrics::RequestStats Stats() const;

 private:
  class SchedulerCall;  // one Submit call (an attempt)

  GenerationStream(const GenerationContext& context,
                   const v1::GenerateRequest& req,
                   const PreparedRequest& prepared,
                   const std::string& request_id,
                   std::shared_ptr<GenerationSink> sink, absl::string_view api,
                   Clock::time_point start);
  // Turns event_ into a delta (and the final when it ends the request).
  // Returns true when a stop string ended it (the scheduler call is then
  // cancelled).
  bool HandleEventLocked(const v1::TokenEvent& event, v1::Delta* delta,
                         std::optional<v1::Final>* final);
  // Starts a Submit call: the request plus the tokens received so far.
  void Submit();
  // A token event of the current call; false when a stop string ended the
  // reply (the call is then cancelled).
  bool OnEvent(const v1::TokenEvent& event);
  // The call ended: resubmits after a backoff when it broke in transport
  // (or a resubmission met a scheduler not ready yet) within
  // scheduler_recovery; otherwise ends the stream.
  void OnCallDone(const SchedulerCall* call, const grpc::Status& status,
                  bool from_scheduler);
  bool ShouldResubmitLocked(const grpc::Status& status, bool from_scheduler,
                            grpc::Status* final_status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs on the delayed runner after the backoff.
  void Resubmit();
  // Sends the final (unless one was sent) and releases the stream.
  void End(const grpc::Status& status);
  // Cancel, ending with `status` instead of CANCELLED.
  void Abort(const grpc::Status& status);
  // MoveOffCell for this stream; whether it was on `target` and moves.
  bool MoveIfOn(const std::string& target);
  v1::Final MakeFinalLocked(v1::FinishReason reason) const;
  // Whether this request's next Submit goes to a prefill cell first.
  bool ShouldSplitLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  GenerationContext context_;
  std::shared_ptr<GenerationSink> sink_;
  std::shared_ptr<GenerationStream> self_;  // until OnDone
  std::string api_;
  bool return_token_ids_, return_logprobs_;
  int32_t top_logprobs_;
  std::vector<std::string> stop_strings_;

  v1::SubmitRequest submit_;  // as first submitted; const after Start

  mutable std::mutex mu_;  // guards everything below
  Detokenizer detok_ ABSL_GUARDED_BY(mu_);
  OutputParser parser_ ABSL_GUARDED_BY(mu_);  // reasoning, tool calls
  Clock::time_point start_ ABSL_GUARDED_BY(mu_);
  Clock::time_point first_token_ ABSL_GUARDED_BY(mu_);
  Clock::time_point last_token_ ABSL_GUARDED_BY(mu_);
  Clock::duration detok_time_ ABSL_GUARDED_BY(mu_){0};
  std::optional<v1::Timings> timings_ ABSL_GUARDED_BY(mu_);
  std::string request_id_ ABSL_GUARDED_BY(mu_);
  v1::FinishReason finish_reason_ ABSL_GUARDED_BY(mu_) = v1::FINISH_REASON_UNSPECIFIED;
  int32_t prompt_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t completion_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t cached_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  bool final_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> abort_status_ ABSL_GUARDED_BY(mu_);  // AbortAll
  std::shared_ptr<SchedulerCall> call_ ABSL_GUARDED_BY(mu_);  // null in backoff
  std::vector<int32_t> received_ ABSL_GUARDED_BY(mu_);  // every token id
  std::string cell_ ABSL_GUARDED_BY(mu_);  // target of the current call
  bool moving_ ABSL_GUARDED_BY(mu_) = false;  // MoveIfOn cancelled the call
  // Since the scheduler call broke, while resubmitting.
  std::optional<Clock::time_point> lost_since_ ABSL_GUARDED_BY(mu_);
  int64_t resubmissions_ ABSL_GUARDED_BY(mu_) = 0;
  // Prefill/decode: tried once per request; the current call's
  // prefill_done (where its KV waits), and the hand-off the next Submit
  // carries to a decode cell.
  bool split_tried_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<v1::KvHandoffRef> prefill_done_ ABSL_GUARDED_BY(mu_);
  std::optional<v1::KvHandoffRef> handoff_ ABSL_GUARDED_BY(mu_);
};

// Records one finished request in `metrics` (may be null): `stats` (the
// stream's Stats(), or default when none started) with the API, status
// code, e2e time since `start`, and finish reason "cancelled" / "error" for
// a CANCELLED / other non-OK status. Problems are logged to stderr.
void RecordFinishedRequest(metrics::FrontendMetrics* metrics,
                           metrics::RequestStats stats, absl::string_view api,
                           const grpc::Status& status,
                           GenerationStream::Clock::time_point start);

// A random 64-bit sampling seed (process-wide generator seeded from
// std::random_device) for a request that brings none (the HTTP API's
// requests without "seed"). Thread-safe.
uint64_t RandomRequestSeed();

// This process's front-end instance: 16 hex digits drawn from
// std::random_device once per process (2^-64 odds that two replicas share
// it). Thread-safe.
const std::string& FrontendInstanceId();

// "<prefix><instance>-<N>" (N a process-wide counter from 1): unique per
// front end and across front ends. Used for the ids of requests that bring
// none and, with prefix "fe-", for every request's id at the scheduler
// (SubmitRequest.request_id), which the client's id never is. Thread-safe.
std::string NextRequestId(absl::string_view prefix = "req-");

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_GENERATION_STREAM_H_
