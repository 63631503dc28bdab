// A process-wide timer thread: runs a task after a delay (the front end's
// resubmission backoff). Tasks run one at a time, in deadline order, on the
// runner's own thread, so a task may drop the last reference to an object
// (a finished stream) without running inside a gRPC callback.
#ifndef PDSERVE_SERVER_FRONTEND_DELAYED_RUNNER_H_
#define PDSERVE_SERVER_FRONTEND_DELAYED_RUNNER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

namespace pdserve::frontend {

// Thread-safe. The destructor stops the thread; tasks not yet due are
// destroyed without running.
class DelayedRunner {
 public:
  using Clock = std::chrono::steady_clock;

  DelayedRunner();
  ~DelayedRunner();
  DelayedRunner(const DelayedRunner&) = delete;
  DelayedRunner& operator=(const DelayedRunner&) = delete;

  // The front end's shared runner (started on first use).
  static DelayedRunner& Global();

  // Runs `task` once `delay` has passed (at once for delay <= 0).
  void RunAfter(Clock::duration delay, std::function<void()> task);

 private:
  struct Entry {
    Clock::time_point due;
    uint64_t order;  // FIFO among equal deadlines
    std::function<void()> task;
    bool operator>(const Entry& o) const {
      return due != o.due ? due > o.due : order > o.order;
    }
  };
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue_;
  uint64_t next_order_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_DELAYED_RUNNER_H_
