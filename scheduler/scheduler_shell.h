// The scheduler's IO shell: drives the pure Policy in a loop thread, talks
// to the engine over gRPC and streams token events to request sinks.
#ifndef PDSERVE_SCHEDULER_SCHEDULER_SHELL_H_
#define PDSERVE_SCHEDULER_SCHEDULER_SHELL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "grpcpp/grpcpp.h"
#include "pdserve/v1/engine.grpc.pb.h"
#include "pdserve/v1/scheduler.pb.h"
#include "scheduler/policy.h"
#include "scheduler/simulator.h"
#include "common/metrics/scheduler_metrics.h"

namespace pdserve::scheduler {

// Where a request's token events go (the Submit stream). Implementations
// must be thread-safe; Close is called exactly once by the shell, after the
// last Send.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void Send(const v1::TokenEvent& event) = 0;
  virtual void Close(const grpc::Status& status) = 0;
};

struct ShellOptions {
  PolicyConfig policy;
  std::string engine_target;  // host:port of the engine
  std::string
      step_log_path;  // CSV prefill_tokens,decode_seqs,step_ms,attended_mpairs
  // A step result not back within this time (a hung engine) ends the step
  // stream: in-flight requests fail UNAVAILABLE and the shell reconnects.
  std::chrono::milliseconds step_deadline{120000};
  // A lost engine (killed, hung past step_deadline, restarted, its stream
  // broken): its requests are kept this long while the shell reconnects,
  // then each resumes by recompute (prompt + the tokens already streamed as
  // its new prompt, the rest of max_new_tokens to come), so its client sees
  // a pause. Past it they end UNAVAILABLE; 0 = end them at once.
  std::chrono::milliseconds engine_recovery{30000};
  // A request the engine is lost under more than this many times ends
  // UNAVAILABLE instead of resuming again (a request that crashes the
  // engine must not crash it forever).
  int64_t max_resumes = 3;
  // > 1: before each step, cap the token budget so that the predicted step
  // time (a StepCostModel fitted online to recent steps) stays within this
  // factor of a decode-only step; 0 = fixed budget.
  double itl_slowdown = 0;
  // With itl_slowdown: a step may always take this long (ms), however short
  // a decode-only step is (--itl-floor-ms).
  double itl_floor_ms = 0;
  // Steps written to the engine ahead of their results (StepStream): 2 means
  // the next step is queued at the engine while one runs, so the engine
  // never waits for a round trip; 1 sends a step only after the last
  // result. A cancellation overtakes the queue (StepRequest.cancel_ids):
  // the engine frees the pages before the next step it starts.
  int64_t pipeline_depth = 2;
  int64_t min_prefill_chunk = 1;  // prefill tokens always allowed per step
  // Not owned, may be null: receives one RecordIteration per step and one
  // RecordRejection per refused submission. Must outlive the shell.
  metrics::SchedulerMetrics* metrics = nullptr;
  // --role: "both", "prefill" or "decode" (reported in the status; front
  // ends send prefill_only requests to prefill cells).
  std::string role = "both";
  // The address other cells' engines reach this cell's engine at, for the
  // hand-offs it exports (KvHandoffRef.engine); empty = engine_target.
  std::string engine_advertise;
};

// Figures for GetStatus and health.
struct ShellStatus {
  bool engine_ready = false;
  bool recovering = false;  // the engine is lost; its requests wait for it
  // Requests resumed (after an engine loss, or resubmitted by a front end
  // after a scheduler loss) and the tokens they prefill again.
  int64_t engine_losses = 0, resumed = 0, recomputed_tokens = 0;
  int32_t waiting = 0, running = 0;
  int64_t steps = 0, preemptions = 0;
  int32_t max_seq_len = 0, vocab_size = 0;
  std::string model;
  std::string role;
  int64_t handoffs_exported = 0, handoffs_imported = 0, handoffs_refused = 0;
  int64_t handoffs_shared_memory = 0;  // imported through shared memory
  // The KV pool as the policy's ledger counts it (pages; 0 while no engine
  // is connected): all, free (prefix-cached ones included), cached only.
  int64_t total_kv_pages = 0, free_kv_pages = 0, cached_kv_pages = 0;
  double step_ms = 0;  // moving mean of recent step times (ms)
};
// Whether two statuses differ in what a router acts on (readiness, queue,
// KV pool, capacity, role); the counters and the step time do not count.
bool LoadChanged(const ShellStatus& a, const ShellStatus& b);

class LiveRequestIds;

// Thread-safe: Submit/Cancel/Status may be called from any thread; the loop
// thread owns the policy. When the engine fails (RPC error other than a
// rejected request, a step past step_deadline, a restart seen by the idle
// ping) the policy is reset and the shell reconnects (polling GetInfo).
// With engine_recovery > 0 the open requests (and ones submitted meanwhile)
// wait and are resumed on the engine that answers; otherwise, or once the
// recovery time is spent, they end with UNAVAILABLE.
class SchedulerShell {
 public:
  explicit SchedulerShell(ShellOptions options);
  ~SchedulerShell();  // stops the loop; open requests end UNAVAILABLE

  void Start();
  void Stop();

  // Queues a request. Errors (engine not ready, queue full, prompt too
  // long, ALREADY_EXISTS for a request_id a live request holds) are
  // delivered through sink->Close. Returns the request's handle
  // for Cancel.
  uint64_t Submit(const v1::SubmitRequest& request,
                  std::shared_ptr<EventSink> sink);
  // Cancels by handle (from Submit): the stream's client went away.
  void Cancel(uint64_t handle);

  ShellStatus Status() const;
  // Called with true/false when the engine becomes ready / is lost.
  void OnReadyChange(std::function<void(bool)> fn) {
    on_ready_ = std::move(fn);
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Request {
    v1::SubmitRequest spec;
    std::shared_ptr<EventSink> sink;
    std::vector<int32_t> generated;
    Clock::time_point submitted, admitted, first_token, last_token;
    bool was_admitted = false;
    // Prompt tokens the engine took from its prefix cache (reported with
    // the admission, before any token was generated).
    int32_t cached_tokens = 0;
    int64_t resumes = 0;  // times resumed after an engine loss
    // Prefill/decode hand-off: the KV staged at the engine for this
    // request's first admission (ImportKv) and the prompt tokens it covers;
    // the hand-off the engine kept for a prefill_only request.
    uint64_t import_id = 0;
    int64_t imported_tokens = 0;
    uint64_t handoff_id = 0;
  };

  // Queues a validated request (under mu_), notifying the loop.
  void EnqueueLocked(uint64_t id, Request r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SubmitRequest.kv_source: has the engine fetch the hand-off (async
  // ImportKv), then queues the request with it, or without it (prefilled
  // here) when the engine refuses it.
  void StartImport(uint64_t id, Request r);
  void FinishImport(uint64_t id, Request r, const grpc::Status& status,
                    const v1::ImportKvResponse& resp);
  // The last event of a prefill_only request that goes on to a decode cell.
  v1::TokenEvent PrefillDoneEvent(const Request& r) const;
  void Loop();
  bool ConnectEngine();
  void DrainInbox();
  // One turn of the step pipeline: plans and writes a step while fewer than
  // pipeline_depth are in flight, then reads the oldest result when the
  // pipeline is full or there is nothing more to plan.
  void RunStep();
  // Opens the StepStream to the engine (after GetInfo succeeded).
  void OpenStepStream();
  // Canceller thread body: writes urgent_cancels_ to the step stream as
  // cancel_ids, so that the engine frees the pages before the step already
  // queued behind the running one (the loop's next plan then releases the
  // sequence and ends the request). Kept off the gRPC callback threads, as
  // a write may wait on flow control.
  void SendCancellations();
  // Watchdog thread body: cancels a stream read older than step_deadline.
  void WatchStepReads();
  // Cancels the StepStream (if open) and forgets the steps in flight.
  void CloseStepStream();
  // Writes `req` to the step stream under write_mu_; false when there is
  // no stream or the write failed. Any thread.
  bool WriteStep(const v1::StepRequest& req);
  // Plans the next step (committed optimistically: outcomes arrive later)
  // and writes it; false when there was nothing to write.
  bool DispatchNext();
  // Reads and applies the oldest in-flight result; false when the engine
  // was lost.
  bool ReceiveOne();
  void ApplyResponse(const StepPlan& plan, const v1::StepResponse& resp);
  void FillAdmit(uint64_t id, const Request& r, const AdmitPages& pages,
                 v1::AddSequenceRequest* add);
  // Ends every open request with `status` and resets the policy.
  void FailAll(const grpc::Status& status);
  // Keeps the open requests for resumption (engine_recovery > 0): resets
  // the policy and the step stream, ends the ones resumed too often.
  void SuspendAll(const std::string& why);
  // After a reconnection: resubmits every kept request to the new policy,
  // in arrival order, as prompt + generated so far.
  void ResumeAll();
  // While the engine is away: ends cancelled kept requests, and all of them
  // once engine_recovery has passed.
  void TendSuspended();
  // The policy's view of request `id`: its prompt followed by the tokens it
  // generated so far (recompute), and what is left of max_new_tokens.
  RequestSpec SpecFor(uint64_t id, const Request& r) const;
  // Fails everything with UNAVAILABLE(why) and starts reconnecting.
  void LoseEngine(const std::string& why);
  // Liveness ping while idle: a dead or restarted engine is lost.
  void CheckEngine();
  void Finish(uint64_t id, v1::FinishReason reason);
  void PublishStatus();
  // Sets the policy's budget from the fitted step cost (itl_slowdown).
  void AdaptBudget();
  // Feeds options_.metrics the plan just run and the queue after it.
  void RecordIteration(const StepPlan& plan, int64_t finished);
  // Counts requests ended because a lost engine could not be resumed.
  void RecordUnrecovered(int64_t requests);
  // Counts a refused submission (status from the policy or the shell).
  void RecordRejection(const absl::Status& status, const RequestSpec& spec);

  ShellOptions options_;
  std::unique_ptr<v1::Engine::Stub> engine_;
  // The pipelined step channel and the plans written to it, oldest first.
  // The loop thread owns them; Cancel() also writes to stream_ (cancel_ids),
  // so writes and changes of stream_ hold write_mu_. Reads are the loop's.
  std::mutex write_mu_;
  std::unique_ptr<grpc::ClientContext> stream_ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::StepRequest, v1::StepResponse>>
      stream_;
  std::deque<StepPlan> in_flight_;
  // Watchdog over stream reads: the loop thread sets read_since_ (steady
  // clock ns, 0 = not reading); the watchdog cancels stream_ctx_ when a read
  // outlives step_deadline. stream_mu_ guards stream_ctx_ against the
  // watchdog.
  std::mutex stream_mu_;
  std::atomic<int64_t> read_since_ns_{0};
  std::thread watchdog_;
  std::vector<SequenceId> engine_forget_;  // refused admissions to release
  std::unique_ptr<Policy> policy_;    // loop thread only
  absl::flat_hash_map<uint64_t, Request> requests_;  // loop thread only
  std::FILE* step_log_ = nullptr;
  int64_t engine_pid_ = 0;             // loop thread only
  // Set while the engine is lost with requests kept (loop thread only).
  std::optional<Clock::time_point> lost_since_;
  std::string lost_why_;
  // Loop thread only.
  int64_t engine_losses_ = 0, resumed_ = 0, recomputed_tokens_ = 0;
  std::atomic<bool> recovering_{false};  // Submit queues while it is set
  // A resubmitted stream was queued while no engine was ready (any thread
  // sets it; the loop starts a recovery window for it).
  std::atomic<bool> resume_pending_{false};
  int64_t steps_ = 0;                  // loop thread only
  double step_ms_mean_ = 0;            // loop thread only (EWMA, 1/16)
  // Requests resumed (or resubmitted) mid-stream whose first token since
  // has not come: while any waits, every client of theirs is paused, so the
  // step budget is not capped for the inter-token latency of the others.
  absl::flat_hash_set<uint64_t> catching_up_;  // loop thread only
  OnlineStepCost online_cost_;  // fitted to recent steps (loop thread only)

  mutable std::mutex mu_;  // guards the members marked so below
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, Request>> inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> cancels_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> urgent_cancels_ ABSL_GUARDED_BY(mu_);  // for the engine, out of band
  std::thread canceller_;
  // Request ids of the requests not yet closed (ALREADY_EXISTS for another).
  std::unique_ptr<LiveRequestIds> live_ids_;
  // Hand-off imports: their own stub (the loop replaces engine_), the ones
  // in flight (Stop waits for them) and the counters of the status.
  std::unique_ptr<v1::Engine::Stub> import_stub_;
  absl::flat_hash_set<uint64_t> importing_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> import_cancels_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> handoffs_shared_memory_{0};
  std::atomic<int64_t> handoffs_exported_{0}, handoffs_imported_{0},
      handoffs_refused_{0};
  ShellStatus status_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> engine_ready_{false};
  std::function<void(bool)> on_ready_;
  std::thread loop_;
};

}  // namespace pdserve::scheduler

#endif  // PDSERVE_SCHEDULER_SCHEDULER_SHELL_H_
