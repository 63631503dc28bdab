#include "server/frontend/delayed_runner.h"

#include <utility>

namespace pdserve::frontend {

DelayedRunner::DelayedRunner() : thread_([this] { Loop(); }) {}

DelayedRunner::~DelayedRunner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

DelayedRunner& DelayedRunner::Global() {
  static DelayedRunner* runner = new DelayedRunner();  // lives to exit
  return *runner;
}

void DelayedRunner::RunAfter(Clock::duration delay,
                             std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push({Clock::now() + delay, next_order_++, std::move(task)});
  }
  cv_.notify_all();
}

void DelayedRunner::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (queue_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const Clock::time_point due = queue_.top().due;
    if (Clock::now() < due) {
      cv_.wait_until(lock, due);
      continue;
    }
    std::function<void()> task = std::move(const_cast<Entry&>(queue_.top()).task);
    queue_.pop();
    lock.unlock();
    task();
    task = nullptr;  // released outside the lock
    lock.lock();
  }
}

}  // namespace pdserve::frontend
