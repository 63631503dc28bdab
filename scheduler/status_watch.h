// Scheduler.WatchStatus: a scheduler's load streamed to the front ends that
// route over cells, instead of each polling GetStatus. The pure part
// (WatchSchedule: when a watcher is sent the next status) is free of clocks
// and IO; StatusWatchHub adds the gRPC streams and one thread that ticks
// for all of them.
#ifndef PDSERVE_SCHEDULER_STATUS_WATCH_H_
#define PDSERVE_SCHEDULER_STATUS_WATCH_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "grpcpp/grpcpp.h"
#include "pdserve/v1/scheduler.pb.h"
#include "scheduler/scheduler_shell.h"

namespace pdserve::scheduler {

// When one watcher gets its next status. Times are milliseconds on any
// monotonic clock the caller keeps. Pure; not thread-safe (one per watch,
// under its owner's lock).
class WatchSchedule {
 public:
  // The request's intervals, clamped: min_interval_ms 0 -> 25, to 5..1000;
  // heartbeat_ms 0 -> 1000, to min_interval_ms..10000.
  explicit WatchSchedule(const v1::WatchStatusRequest& request);

  int64_t min_interval_ms() const { return min_interval_ms_; }
  int64_t heartbeat_ms() const { return heartbeat_ms_; }
  // Whether `status` is due at `now_ms`: nothing was sent yet; or the load
  // changed (LoadChanged) and min_interval_ms passed since the last send;
  // or heartbeat_ms passed.
  bool Due(const ShellStatus& status, int64_t now_ms) const;
  // Records that `status` was sent at `now_ms`.
  void Sent(const ShellStatus& status, int64_t now_ms);

 private:
  int64_t min_interval_ms_, heartbeat_ms_;
  bool sent_any_ = false;
  ShellStatus last_;
  int64_t last_ms_ = 0;
};

// The SchedulerStatus message of a shell status.
v1::SchedulerStatus ToProto(const ShellStatus& s);

// Every open WatchStatus stream of one scheduler. Thread-safe. `status` is
// called from the hub's thread (every tick_ms while a watch is open) and
// must not call back into the hub. Stop() (or the destructor) ends every
// open watch with OK and refuses new ones with UNAVAILABLE; the gRPC server
// may then shut down without waiting on them.
class StatusWatchHub {
 public:
  explicit StatusWatchHub(std::function<ShellStatus()> status,
                          int64_t tick_ms = 5);
  ~StatusWatchHub();

  // The reactor of a new WatchStatus call (owned by gRPC until OnDone).
  grpc::ServerWriteReactor<v1::SchedulerStatus>* Watch(
      const v1::WatchStatusRequest& request);
  void Stop();
  // Open watches (tests, metrics).
  int open() const;

  class Reactor;

 private:
  void Loop();
  void Remove(Reactor* reactor);

  const std::function<ShellStatus()> status_;
  const int64_t tick_ms_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::vector<Reactor*> reactors_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace pdserve::scheduler

#endif  // PDSERVE_SCHEDULER_STATUS_WATCH_H_
