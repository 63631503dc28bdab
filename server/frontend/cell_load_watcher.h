// A front end's live view of one cell's load: a thread that holds the
// cell's Scheduler.WatchStatus stream open (the scheduler pushes a status
// when its queue, KV pool or readiness changes, and a heartbeat), reconnects
// when it breaks, and falls back to polling GetStatus against a scheduler
// that does not implement the stream.
#ifndef PDSERVE_SERVER_FRONTEND_CELL_LOAD_WATCHER_H_
#define PDSERVE_SERVER_FRONTEND_CELL_LOAD_WATCHER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "pdserve/v1/scheduler.grpc.pb.h"

namespace pdserve::frontend {

// Watches one cell from construction to destruction. Thread-safe. The
// callback runs on the watcher's thread, never concurrently with itself:
// (true, status) for each status the cell sends; (false, {}) when the cell
// stops answering (stream broken or silent past `stale_after_ms`, or a
// failed poll). It must not destroy the watcher.
class CellLoadWatcher {
 public:
  struct Options {
    int min_interval_ms = 25;   // WatchStatusRequest.min_interval_ms
    int heartbeat_ms = 1000;    // WatchStatusRequest.heartbeat_ms
    // A stream silent this long (no status, not even a heartbeat) counts
    // as a lost cell; the watcher cancels and reconnects.
    int stale_after_ms = 3000;
    int poll_interval_ms = 100;  // GetStatus fallback
    int max_retry_ms = 500;      // reconnect backoff cap (from 50 ms)
  };
  using Callback =
      std::function<void(bool answered, const v1::SchedulerStatus& status)>;

  CellLoadWatcher(std::shared_ptr<v1::Scheduler::Stub> stub, Options options,
                  Callback callback);
  ~CellLoadWatcher();  // cancels the stream and joins the thread
  CellLoadWatcher(const CellLoadWatcher&) = delete;
  CellLoadWatcher& operator=(const CellLoadWatcher&) = delete;

  // Cancels the stream if it has been silent past stale_after_ms (the
  // router's poller calls this; the thread then reconnects).
  void CheckStale();
  // Statuses received over the stream and reconnections so far (tests).
  int64_t received() const { return received_; }
  int64_t reconnects() const { return reconnects_; }
  bool polling() const { return polling_; }

 private:
  void Run();
  // One stream, until it ends; its final status.
  grpc::Status WatchOnce(bool& got_any);
  void PollUntilStopped();
  // Waits `ms` or until stopped; whether stopped.
  bool SleepOrStop(int ms);

  const std::shared_ptr<v1::Scheduler::Stub> stub_;
  const Options options_;
  const Callback callback_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* open_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::chrono::steady_clock::time_point last_read_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> received_{0}, reconnects_{0};
  std::atomic<bool> polling_{false};
  std::thread thread_;
};

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_CELL_LOAD_WATCHER_H_
