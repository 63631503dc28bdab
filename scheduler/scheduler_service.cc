#include "scheduler/scheduler_service.h"

#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "common/process/process.h"
#include "proto/rpc_util.h"
#include "common/metrics/metrics_flags.h"
#include "common/metrics/process_metrics.h"

namespace pdserve::scheduler {
namespace {

// Writes a request's token events to its Submit stream, one write in
// flight at a time. The shell holds it (as EventSink) through a shared_ptr;
// the gRPC reactor is detached from it in OnDone.
class SubmitStream : public EventSink {
 public:
  class Reactor;

  void Send(const v1::TokenEvent& event) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (reactor_ == nullptr || closed_) return;
    queue_.push_back(event);
    if (!writing_) StartNextLocked();
  }
  void Close(const grpc::Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    if (!status.ok()) queue_.erase(queue_.begin() + (writing_ ? 1 : 0), queue_.end());
    close_status_ = status;
    if (!writing_) FinishLocked();
  }

  void Attach(grpc::ServerWriteReactor<v1::TokenEvent>* reactor) {
    std::lock_guard<std::mutex> lock(mu_);
    reactor_ = reactor;
  }
  void OnWriteDone(bool ok) {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!queue_.empty()) queue_.pop_front();
    if (!ok) queue_.clear();  // the client is gone; the cancel follows
    if (!queue_.empty()) {
      StartNextLocked();
    } else if (closed_) {
      FinishLocked();
    }
  }
  void Detach() {
    std::lock_guard<std::mutex> lock(mu_);
    reactor_ = nullptr;
  }

 private:
  void StartNextLocked() {
    writing_ = true;
    reactor_->StartWrite(&queue_.front());
  }
  void FinishLocked() {
    if (reactor_ != nullptr && !finished_) {
      finished_ = true;
      reactor_->Finish(close_status_);
    }
  }

  std::mutex mu_;
  grpc::ServerWriteReactor<v1::TokenEvent>* reactor_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::deque<v1::TokenEvent> queue_ ABSL_GUARDED_BY(mu_);  // front is in flight when writing_
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status close_status_ ABSL_GUARDED_BY(mu_);
};

class SubmitStream::Reactor : public grpc::ServerWriteReactor<v1::TokenEvent> {
 public:
  Reactor(grpc::CallbackServerContext* ctx, SchedulerShell* shell,
          const v1::SubmitRequest& req)
      : shell_(shell), stream_(std::make_shared<SubmitStream>()) {
    // Marks every status this scheduler ends the call with, so the front
    // end tells them from a transport failure (a dead scheduler).
    ctx->AddTrailingMetadata(std::string(rpc::kOriginKey), "scheduler");
    stream_->Attach(this);
    handle_ = shell_->Submit(req, stream_);
  }
  void OnWriteDone(bool ok) override { stream_->OnWriteDone(ok); }
  void OnCancel() override { shell_->Cancel(handle_); }
  void OnDone() override {
    stream_->Detach();
    delete this;
  }

 private:
  SchedulerShell* shell_;
  std::shared_ptr<SubmitStream> stream_;
  uint64_t handle_ = 0;
};


}  // namespace

grpc::ServerWriteReactor<v1::TokenEvent>* SchedulerServiceImpl::Submit(
    grpc::CallbackServerContext* ctx, const v1::SubmitRequest* req) {
  return new SubmitStream::Reactor(ctx, shell_, *req);
}

grpc::ServerUnaryReactor* SchedulerServiceImpl::GetStatus(
    grpc::CallbackServerContext* ctx, const v1::GetStatusRequest*,
    v1::SchedulerStatus* resp) {
  *resp = ToProto(shell_->Status());
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<v1::SchedulerStatus>*
SchedulerServiceImpl::WatchStatus(grpc::CallbackServerContext*,
                                  const v1::WatchStatusRequest* req) {
  return watches_.Watch(*req);
}

int RunSchedulerProcess(const config::SchedulerProcessOptions& flags) {
  if (flags.role != "both" && flags.role != "prefill" &&
      flags.role != "decode") {
    std::fprintf(stderr,
                 "pdserve scheduler: --role %s: must be both, prefill or "
                 "decode\n",
                 flags.role.c_str());
    return 2;
  }
  ShellOptions options;
  options.role = flags.role;
  options.engine_advertise = flags.engine_advertise;
  options.engine_target = flags.engine;
  options.step_log_path = flags.step_log;
  options.itl_slowdown = flags.itl_slowdown;
  options.itl_floor_ms = flags.itl_floor_ms;
  options.step_deadline = std::chrono::milliseconds(
      static_cast<int64_t>(flags.step_timeout_s * 1000.0));
  options.engine_recovery = std::chrono::milliseconds(
      static_cast<int64_t>(flags.engine_recovery_s * 1000.0));
  options.policy.step_token_budget = flags.budget;
  options.policy.prefill_chunk = flags.chunk;
  options.policy.max_running = flags.max_running;
  options.policy.max_waiting = flags.max_queue;
  options.pipeline_depth = flags.pipeline_depth;
  auto metrics_flags = metrics::MetricsFlagsFromOptions(
      flags.metrics, flags.host, flags.name.empty() ? "pdserve" : flags.name);
  std::optional<metrics::SchedulerMetricsHandle> metrics;
  if (metrics_flags.has_value()) {
    auto handle = metrics::StartSchedulerMetrics(*metrics_flags);
    if (!handle.ok()) {
      std::fprintf(stderr, "pdserve scheduler: metrics: %s\n",
                   std::string(handle.status().message()).c_str());
      return 1;
    }
    metrics = std::move(*handle);
    options.metrics = metrics->metrics.get();
    std::printf("pdserve scheduler: metrics %s\n",
                metrics->server->url().c_str());
  }
  SchedulerShell shell(options);
  SchedulerServiceImpl service(&shell);
  const std::string& host = flags.host;
  auto server = rpc::StartServer(host, flags.port, {&service});
  if (!server.ok()) {
    std::fprintf(stderr, "pdserve scheduler: %s\n",
                 std::string(server.status().message()).c_str());
    return 1;
  }
  grpc::Server* srv = server->server.get();
  metrics::MetricsServer* m = metrics ? metrics->server.get() : nullptr;
  shell.OnReadyChange([srv, m](bool ready) {
    rpc::SetServing(*srv, {"pdserve.v1.Scheduler"}, ready);
    if (m != nullptr) m->SetReady(ready);
  });
  shell.Start();
  std::printf("pdserve scheduler: listening on %s:%d (engine %s)\n",
              host.c_str(), server->port, options.engine_target.c_str());
  std::fflush(stdout);
  process::WaitForTerminationSignal();
  // Drain: in-flight requests may finish within the deadline; the shell's
  // shutdown then ends whatever is left with UNAVAILABLE.
  rpc::SetServing(*srv, {"pdserve.v1.Scheduler"}, false);
  service.StopWatches();
  srv->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(30));
  shell.Stop();
  return 0;
}

}  // namespace pdserve::scheduler
