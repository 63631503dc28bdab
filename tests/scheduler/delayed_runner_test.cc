// DelayedRunner: tasks run once, not before their delay, in deadline order
// (FIFO among equal deadlines), on the runner's thread; tasks pending at
// destruction are dropped without running.
#include "server/frontend/delayed_runner.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve::frontend {
namespace {

using Clock = DelayedRunner::Clock;
using std::chrono::milliseconds;

TEST(DelayedRunnerTest, RunsInDeadlineOrderNotBeforeTheDelay) {
  DelayedRunner runner;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> order;
  std::vector<Clock::duration> waited(4);
  const Clock::time_point start = Clock::now();
  const int delays_ms[] = {60, 10, 30, 10};
  for (int i = 0; i < 4; ++i) {
    runner.RunAfter(milliseconds(delays_ms[i]), [&, i] {
      std::lock_guard<std::mutex> lock(mu);
      waited[i] = Clock::now() - start;
      order.push_back(i);
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10),
                          [&] { return order.size() == 4; }));
  EXPECT_THAT(order, ::testing::ElementsAre(1, 3, 2, 0));
  for (int i = 0; i < 4; ++i) {
    EXPECT_GE(waited[i], milliseconds(delays_ms[i])) << i;
  }
}

TEST(DelayedRunnerTest, RunsOnItsOwnThreadAndMayDropTheLastReference) {
  DelayedRunner runner;
  std::atomic<bool> ran{false};
  std::thread::id where;
  auto owned = std::make_shared<int>(7);
  std::weak_ptr<int> watch = owned;
  runner.RunAfter(milliseconds(0), [&, owned = std::move(owned)]() mutable {
    where = std::this_thread::get_id();
    owned.reset();
    ran = true;
  });
  for (int i = 0; i < 1000 && !ran; ++i) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_TRUE(ran);
  EXPECT_NE(where, std::this_thread::get_id());
  for (int i = 0; i < 1000 && !watch.expired(); ++i) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_TRUE(watch.expired());
}

TEST(DelayedRunnerTest, PendingTasksAreDroppedAtDestruction) {
  std::atomic<int> ran{0};
  auto token = std::make_shared<int>(1);
  std::weak_ptr<int> watch = token;
  {
    DelayedRunner runner;
    runner.RunAfter(std::chrono::hours(1), [&, token] { ++ran; });
  }
  token.reset();
  EXPECT_EQ(ran.load(), 0);
  EXPECT_TRUE(watch.expired());
}

}  // namespace
}  // namespace pdserve::frontend
