#include "kernels/thread_pool.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

TEST(ThreadPoolTest, ParallelForCoversEveryIndexOnce) {
  for (int threads = 1; threads <= 8; ++threads) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {1, 2, 3, 7, 64, 1000, 4097}) {
      for (int64_t grain : {1, 3, 16, 5000}) {
        std::vector<std::atomic<int>> hits(n);
        pool.ParallelFor(n, grain, [&](int64_t b, int64_t e) {
          ASSERT_LT(b, e);
          // Every range but the last is at least `grain` long.
          if (e != n) {
            EXPECT_GE(e - b, grain);
          }
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[i].load(), 1) << "threads=" << threads << " n=" << n
                                       << " grain=" << grain << " i=" << i;
        }
      }
    }
  }
}

TEST(ThreadPoolTest, ManyCallsSumCorrectly) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    std::atomic<int64_t> total{0};
    constexpr int kCalls = 5000;
    for (int c = 0; c < kCalls; ++c) {
      pool.ParallelFor(100, 1, [&](int64_t b, int64_t e) {
        int64_t s = 0;
        for (int64_t i = b; i < e; ++i) s += i;
        total.fetch_add(s);
      });
    }
    EXPECT_EQ(total.load(), int64_t{kCalls} * 4950) << "threads=" << threads;
  }
}

TEST(ThreadPoolTest, UsesSeveralThreadsForLargeRanges) {
  ThreadPool pool(3);
  std::atomic<int> ranges{0};
  pool.ParallelFor(300, 10, [&](int64_t, int64_t) { ranges.fetch_add(1); });
  EXPECT_EQ(ranges.load(), 12);  // 4 per thread
  ranges = 0;
  pool.ParallelFor(50, 10, [&](int64_t, int64_t) { ranges.fetch_add(1); });
  EXPECT_EQ(ranges.load(), 5);  // limited by the grain
  ranges = 0;
  pool.ParallelFor(15, 10, [&](int64_t, int64_t) { ranges.fetch_add(1); });
  EXPECT_EQ(ranges.load(), 1);
}

TEST(ThreadPoolTest, RunOnAllCallsEachThreadIndexOnce) {
  for (int threads = 1; threads <= 6; ++threads) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 100; ++rep) {
      std::vector<std::atomic<int>> hits(threads);
      pool.RunOnAll([&](int i) {
        ASSERT_GE(i, 0);
        ASSERT_LT(i, threads);
        hits[i].fetch_add(1);
      });
      for (int i = 0; i < threads; ++i) ASSERT_EQ(hits[i].load(), 1);
    }
  }
}

TEST(ThreadPoolTest, RunOnAllNeverOverlapsAnIndex) {
  ThreadPool pool(4);
  std::vector<std::atomic<bool>> busy(4);
  std::atomic<int> overlaps{0}, calls{0};
  for (int rep = 0; rep < 2000; ++rep) {
    pool.RunOnAll([&](int i) {
      if (busy[i].exchange(true)) overlaps.fetch_add(1);
      calls.fetch_add(1);
      busy[i].store(false);
    });
  }
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(calls.load(), 2000 * 4);
}

TEST(ThreadPoolTest, ZeroLengthRangeDoesNothing) {
  ThreadPool pool(2);
  bool called = false;
  pool.ParallelFor(0, 1, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

TEST(ThreadPoolTest, SurvivesIdlePeriodsBetweenCalls) {
  // Workers go to sleep after spinning; a later call must wake them.
  ThreadPool pool(3);
  for (int rep = 0; rep < 5; ++rep) {
    std::atomic<int> sum{0};
    pool.ParallelFor(30, 1, [&](int64_t b, int64_t e) {
      sum.fetch_add(static_cast<int>(e - b));
    });
    EXPECT_EQ(sum.load(), 30);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace
}  // namespace pdserve
