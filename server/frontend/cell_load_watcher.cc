#include "server/frontend/cell_load_watcher.h"

#include <algorithm>

namespace pdserve::frontend {

CellLoadWatcher::CellLoadWatcher(std::shared_ptr<v1::Scheduler::Stub> stub,
                                 Options options, Callback callback)
    : stub_(std::move(stub)),
      options_(options),
      callback_(std::move(callback)) {
  thread_ = std::thread([this] { Run(); });
}

CellLoadWatcher::~CellLoadWatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    if (open_ != nullptr) open_->TryCancel();
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void CellLoadWatcher::CheckStale() {
  std::lock_guard<std::mutex> lock(mu_);
  if (open_ == nullptr) return;
  if (std::chrono::steady_clock::now() - last_read_ >
      std::chrono::milliseconds(options_.stale_after_ms)) {
    open_->TryCancel();
  }
}

bool CellLoadWatcher::SleepOrStop(int ms) {
  std::unique_lock<std::mutex> lock(mu_);
  return wake_.wait_for(lock, std::chrono::milliseconds(ms),
                        [&] { return stop_; });
}

grpc::Status CellLoadWatcher::WatchOnce(bool& got_any) {
  grpc::ClientContext ctx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return grpc::Status::CANCELLED;
    open_ = &ctx;
    last_read_ = std::chrono::steady_clock::now();
  }
  v1::WatchStatusRequest request;
  request.set_min_interval_ms(options_.min_interval_ms);
  request.set_heartbeat_ms(options_.heartbeat_ms);
  auto reader = stub_->WatchStatus(&ctx, request);
  v1::SchedulerStatus status;
  while (reader->Read(&status)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_read_ = std::chrono::steady_clock::now();
    }
    got_any = true;
    ++received_;
    callback_(true, status);
  }
  grpc::Status result = reader->Finish();
  std::lock_guard<std::mutex> lock(mu_);
  open_ = nullptr;
  return result;
}

void CellLoadWatcher::PollUntilStopped() {
  polling_ = true;
  do {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(300));
    v1::SchedulerStatus status;
    const bool answered = stub_->GetStatus(&ctx, {}, &status).ok();
    callback_(answered, answered ? status : v1::SchedulerStatus());
  } while (!SleepOrStop(std::max(1, options_.poll_interval_ms)));
}

void CellLoadWatcher::Run() {
  int retry_ms = 50;
  while (true) {
    bool got_any = false;
    const grpc::Status status = WatchOnce(got_any);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      PollUntilStopped();  // a scheduler from before WatchStatus
      return;
    }
    callback_(false, v1::SchedulerStatus());
    ++reconnects_;
    retry_ms = got_any ? 50 : std::min(2 * retry_ms, options_.max_retry_ms);
    if (SleepOrStop(retry_ms)) return;
  }
}

}  // namespace pdserve::frontend
