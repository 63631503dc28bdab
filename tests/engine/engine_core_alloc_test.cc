// No heap allocation per engine step in steady state: this binary replaces
// the global operator new with a counting one and runs 100 mixed steps
// (decodes plus prefill chunks) after a warm-up, with and without the prefix
// cache (which indexes every page the steps fill).
#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "engine/core/engine_core.h"
#include "engine/model/sampler.h"
#include "gtest/gtest.h"
#include "kernels/thread_pool.h"
#include "tests/common/counting_allocator.h"
#include "tests/engine/engine_core_test_util.h"

namespace pdserve {
namespace {

class EngineCoreAllocTest : public ::testing::TestWithParam<bool> {};

TEST_P(EngineCoreAllocTest, NoHeapAllocationInSteadyStateSteps) {
  ThreadPool threads(2);
  EngineOptions o;
  o.kv_memory = {.bytes = 16 << 20};
  o.max_sequences = 16;
  o.max_step_tokens = 256;
  o.prefix_cache = GetParam();
  absl::StatusOr<std::unique_ptr<EngineCore>> created = EngineCore::Create(
      testing_util::TinyRandomModel(3), &threads, std::move(o));
  ASSERT_TRUE(created.ok()) << created.status();
  EngineCore& e = **created;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.top_k = 20;
  sampled.top_p = 0.9f;
  // 8 decoding sequences and 2 long prompts prefilled in chunks of 8
  // (1000 tokens: still prefilling after the 103 steps).
  for (SequenceId id = 0; id < 10; ++id) {
    const int64_t len = id < 8 ? 5 + id : 1000;
    ASSERT_TRUE(e.AddSequence(id, testing_util::RandomTokens(len, 97, id), 1024,
                              id % 2 ? sampled : greedy, {}, 1000)
                    .ok());
  }
  std::vector<StepPlanEntry> plan;
  plan.reserve(16);
  StepResult r;
  std::vector<int64_t> left(10);
  for (SequenceId id = 0; id < 10; ++id) left[id] = id < 8 ? 5 + id : 1000;
  auto run_steps = [&](int n) {
    for (int s = 0; s < n; ++s) {
      plan.clear();
      for (SequenceId id = 0; id < 10; ++id) {
        plan.push_back(
            {id, static_cast<int32_t>(
                     left[id] > 0 ? std::min<int64_t>(left[id], 8) : 1)});
      }
      ASSERT_TRUE(e.Step(plan, &r).ok());
      for (size_t i = 0; i < r.sequences.size(); ++i) {
        left[i] -= r.sequences[i].tokens_processed;
        ASSERT_EQ(r.sequences[i].finish, FinishReason::kNone);
      }
    }
  };
  run_steps(3);  // warm-up: result vector, first pages
  const int64_t before = test::AllocationCount();
  run_steps(100);
  const int64_t after = test::AllocationCount();
  EXPECT_EQ(after - before, 0) << "heap allocations in 100 steps";
  // The counter sees allocations at all (the test can fail).
  auto probe = std::make_unique<std::vector<int>>(3);
  EXPECT_GT(test::AllocationCount(), after);
  EXPECT_GT(left[8], 0);  // still prefilling: mixed steps throughout
  // The cache was on (it looked every prompt up) exactly when asked.
  EXPECT_EQ(e.Stats().prefix_query_tokens > 0, GetParam());
}

INSTANTIATE_TEST_SUITE_P(PrefixCache, EngineCoreAllocTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "On" : "Off";
                         });

}  // namespace
}  // namespace pdserve
