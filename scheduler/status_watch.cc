#include "scheduler/status_watch.h"

#include <algorithm>
#include <chrono>

namespace pdserve::scheduler {

WatchSchedule::WatchSchedule(const v1::WatchStatusRequest& request) {
  const int64_t min_interval =
      request.min_interval_ms() == 0 ? 25 : request.min_interval_ms();
  min_interval_ms_ = std::clamp<int64_t>(min_interval, 5, 1000);
  const int64_t heartbeat =
      request.heartbeat_ms() == 0 ? 1000 : request.heartbeat_ms();
  heartbeat_ms_ = std::clamp<int64_t>(heartbeat, min_interval_ms_, 10000);
}

bool WatchSchedule::Due(const ShellStatus& status, int64_t now_ms) const {
  if (!sent_any_) return true;
  const int64_t since = now_ms - last_ms_;
  if (since >= heartbeat_ms_) return true;
  return since >= min_interval_ms_ && LoadChanged(status, last_);
}

void WatchSchedule::Sent(const ShellStatus& status, int64_t now_ms) {
  sent_any_ = true;
  last_ = status;
  last_ms_ = now_ms;
}

v1::SchedulerStatus ToProto(const ShellStatus& s) {
  v1::SchedulerStatus p;
  p.set_engine_ready(s.engine_ready);
  p.set_waiting(s.waiting);
  p.set_running(s.running);
  p.set_steps(s.steps);
  p.set_preemptions(s.preemptions);
  p.set_max_seq_len(s.max_seq_len);
  p.set_vocab_size(s.vocab_size);
  p.set_model(s.model);
  p.set_engine_losses(s.engine_losses);
  p.set_resumed_requests(s.resumed);
  p.set_recomputed_tokens(s.recomputed_tokens);
  p.set_role(s.role);
  p.set_handoffs_exported(s.handoffs_exported);
  p.set_handoffs_imported(s.handoffs_imported);
  p.set_handoffs_shared_memory(s.handoffs_shared_memory);
  p.set_handoffs_refused(s.handoffs_refused);
  p.set_total_kv_pages(s.total_kv_pages);
  p.set_free_kv_pages(s.free_kv_pages);
  p.set_cached_kv_pages(s.cached_kv_pages);
  p.set_step_ms(s.step_ms);
  return p;
}

// One WatchStatus stream. Its state is guarded by the hub's mutex; one
// write in flight at a time; Finish exactly once, after the last write.
class StatusWatchHub::Reactor
    : public grpc::ServerWriteReactor<v1::SchedulerStatus> {
 public:
  Reactor(StatusWatchHub* hub, const v1::WatchStatusRequest& request)
      : hub_(hub), schedule_(request) {}

  void MaybeSendLocked(const ShellStatus& status, int64_t now_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(hub_->mu_) {
    if (writing_ || ending_ || !schedule_.Due(status, now_ms)) return;
    schedule_.Sent(status, now_ms);
    message_ = ToProto(status);
    writing_ = true;
    StartWrite(&message_);
  }
  // Ends the stream with `status` once no write is in flight.
  void EndLocked(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(hub_->mu_) {
    if (ending_) return;
    ending_ = true;
    end_status_ = status;
    if (!writing_) Finish(end_status_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(hub_->mu_);
    writing_ = false;
    if (!ok) {
      EndLocked(grpc::Status(grpc::StatusCode::CANCELLED, "watcher gone"));
    } else if (ending_) {
      Finish(end_status_);
    }
  }
  void OnCancel() override {
    std::lock_guard<std::mutex> lock(hub_->mu_);
    EndLocked(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }
  void OnDone() override {
    hub_->Remove(this);
    delete this;
  }

 private:
  StatusWatchHub* const hub_;
  WatchSchedule schedule_ ABSL_GUARDED_BY(hub_->mu_);
  v1::SchedulerStatus message_;  // the write in flight
  bool writing_ ABSL_GUARDED_BY(hub_->mu_) = false;
  bool ending_ ABSL_GUARDED_BY(hub_->mu_) = false;
  grpc::Status end_status_ ABSL_GUARDED_BY(hub_->mu_);
};

StatusWatchHub::StatusWatchHub(std::function<ShellStatus()> status,
                               int64_t tick_ms)
    : status_(std::move(status)), tick_ms_(std::max<int64_t>(1, tick_ms)) {
  thread_ = std::thread([this] { Loop(); });
}

StatusWatchHub::~StatusWatchHub() {
  Stop();
  // The gRPC server normally reaps every stream before the hub goes; wait
  // a little for any OnDone still on its way.
  std::unique_lock<std::mutex> lock(mu_);
  wake_.wait_for(lock, std::chrono::seconds(5),
                 [&] { return reactors_.empty(); });
}

grpc::ServerWriteReactor<v1::SchedulerStatus>* StatusWatchHub::Watch(
    const v1::WatchStatusRequest& request) {
  auto* reactor = new Reactor(this, request);
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::UNAVAILABLE, "scheduler stopping"));
    return reactor;
  }
  reactors_.push_back(reactor);
  wake_.notify_all();
  return reactor;
}

void StatusWatchHub::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_) {
      stopped_ = true;
      for (Reactor* r : reactors_) r->EndLocked(grpc::Status::OK);
    }
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

int StatusWatchHub::open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(reactors_.size());
}

void StatusWatchHub::Remove(Reactor* reactor) {
  std::lock_guard<std::mutex> lock(mu_);
  reactors_.erase(std::remove(reactors_.begin(), reactors_.end(), reactor),
                  reactors_.end());
  wake_.notify_all();
}

void StatusWatchHub::Loop() {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_) {
    if (reactors_.empty()) {
      wake_.wait(lock, [&] { return stopped_ || !reactors_.empty(); });
      continue;
    }
    // The shell's status outside the hub's lock (it takes the shell's).
    lock.unlock();
    const ShellStatus status = status_();
    const int64_t now_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - start)
            .count();
    lock.lock();
    if (stopped_) break;
    for (Reactor* r : reactors_) r->MaybeSendLocked(status, now_ms);
    wake_.wait_for(lock, std::chrono::milliseconds(tick_ms_),
                   [&] { return stopped_; });
  }
}

}  // namespace pdserve::scheduler
