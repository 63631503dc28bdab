#include "scheduler/simulator.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve::scheduler {
namespace {

using ::testing::HasSubstr;

TEST(SimulatorTest, ParsesCsvWithHeaderAndJson) {
  auto csv = ParseTrace("arrival_s,prompt_tokens,output_tokens\n# c\n0,10,5\n0.5,20,3,2\n");
  ASSERT_TRUE(csv.ok()) << csv.status();
  ASSERT_EQ(csv->size(), 2u);
  EXPECT_EQ((*csv)[1].prompt_tokens, 20);
  EXPECT_EQ((*csv)[1].priority, 2);
  auto json = ParseTrace(
      R"([{"arrival_s":0,"prompt_tokens":4,"output_tokens":2},)"
      R"({"arrival_s":1.5,"prompt_tokens":8,"output_tokens":1,"priority":1}])");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ((*json)[1].arrival_s, 1.5);
  auto jsonl = ParseTrace(
      "{\"arrival_s\":0,\"prompt_tokens\":4,\"output_tokens\":2}\n"
      "{\"arrival_s\":1,\"prompt_tokens\":4,\"output_tokens\":2}\n");
  ASSERT_TRUE(jsonl.ok()) << jsonl.status();
  EXPECT_EQ(jsonl->size(), 2u);
}

TEST(SimulatorTest, RejectsBadTraces) {
  auto bad = ParseTrace("0,10,0\n");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("output_tokens 0"));
  EXPECT_THAT(ParseTrace("0,x,1\n").status().message(), HasSubstr("'x'"));
  EXPECT_THAT(ParseTrace(R"([{"arrival_s":0}])").status().message(),
              HasSubstr("element 0"));
}

TEST(SimulatorTest, ParsesSharedPrefixColumns) {
  auto csv = ParseTrace("0,100,5,0,7,64\n0.1,80,5,1,7,64\n");
  ASSERT_TRUE(csv.ok()) << csv.status();
  EXPECT_EQ((*csv)[1].prefix_group, 7);
  EXPECT_EQ((*csv)[1].prefix_tokens, 64);
  auto json = ParseTrace(
      R"([{"arrival_s":0,"prompt_tokens":40,"output_tokens":2,)"
      R"("prefix_group":3,"prefix_tokens":32}])");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ((*json)[0].prefix_tokens, 32);
  EXPECT_THAT(ParseTrace("0,10,5,0,7\n").status().message(),
              HasSubstr("needs prefix_tokens"));
  EXPECT_THAT(ParseTrace("0,10,5,0,7,11\n").status().message(),
              HasSubstr("prefix_tokens 11 within 0..prompt_tokens 10"));
}

TEST(SimulatorTest, OnlineCostFitsEveryEighthStep) {
  OnlineStepCost online;
  const StepCostModel truth{3.0, 0.2, 1.5};
  for (int i = 0; i < 7; ++i) {
    online.Record({i * 10, i % 3 + 1, truth.StepMs(i * 10, i % 3 + 1)});
  }
  EXPECT_FALSE(online.model().has_value());  // no fit before 8 steps
  online.Record({5, 4, truth.StepMs(5, 4)});
  ASSERT_TRUE(online.model().has_value());
  EXPECT_NEAR(online.model()->fixed_ms, 3.0, 1e-6);
  EXPECT_NEAR(online.model()->prefill_token_ms, 0.2, 1e-6);
  EXPECT_NEAR(online.model()->decode_seq_ms, 1.5, 1e-6);
  // Decode-only steps fit no prefill cost: the previous model stays.
  for (int i = 0; i < 8; ++i) online.Record({0, 4, 99.0});
  EXPECT_NEAR(online.model()->prefill_token_ms, 0.2, 1e-6);
}

TEST(SimulatorTest, SingleRequestTimingsFollowCostModel) {
  // 1 request: prompt 8 in one step (10 + 8*1 = 18 ms) gives token 1; then
  // 3 decodes of 10 + 2 = 12 ms each.
  StepCostModel cost{10, 1, 2};
  std::vector<TraceRequest> trace = {{0, 8, 4, 0}};
  SimulationResult r = Simulate(trace, {.step_token_budget = 64, .prefill_chunk = 64},
                                {4, 100, 64}, cost);
  EXPECT_EQ(r.completed, 1);
  EXPECT_EQ(r.steps, 4);
  EXPECT_DOUBLE_EQ(r.ttft_ms.p50, 18);
  EXPECT_EQ(r.itl_ms.count, 3);
  EXPECT_DOUBLE_EQ(r.itl_ms.p99, 12);
  EXPECT_NEAR(r.duration_s, (18 + 36) / 1000.0, 1e-12);
  EXPECT_NEAR(r.output_tokens_per_s, 4 / r.duration_s, 1e-9);
}

TEST(SimulatorTest, ChunkingBoundsDecodeLatencyUnderLongPrefill) {
  // Eight decoding streams, then a 2048-token prompt arrives.
  std::vector<TraceRequest> trace;
  for (int i = 0; i < 8; ++i) trace.push_back({0, 16, 40, 0});
  trace.push_back({0.05, 2048, 4, 0});
  StepCostModel cost{2, 0.05, 0.5};
  PoolGeometry pool{16, 4096, 4096};
  auto chunked = Simulate(trace, {.step_token_budget = 256, .prefill_chunk = 128},
                          pool, cost);
  auto whole = Simulate(trace, {.step_token_budget = 256, .prefill_chunk = 0},
                        pool, cost);
  // Whole-prompt prefill stalls every decode for ~100 ms once; chunks cap a
  // step at 2 + 0.05*248 + 4 ms.
  EXPECT_GT(whole.itl_ms.count, 0);
  EXPECT_GT(whole.itl_ms.p99, 100);
  EXPECT_LT(chunked.itl_ms.p99, 2 + 0.05 * 256 + 0.5 * 8 + 1e-9);
}

TEST(SimulatorTest, AdaptiveBudgetKeepsStepsWithinTheSlowdown) {
  // Decode-only step with 8 streams: 2 + 0.5 * 8 = 6 ms. With slowdown 1.5
  // prefill may add 3 ms = 60 tokens a step, so no step (hence no gap
  // between a stream's tokens) exceeds 9 ms; a fixed 256-token budget gives
  // 6 + 0.05 * 248 = 18.4 ms steps while the prompt prefills.
  std::vector<TraceRequest> trace;
  for (int i = 0; i < 8; ++i) trace.push_back({0, 16, 60, 0});
  trace.push_back({0.05, 2048, 4, 0});
  StepCostModel cost{2, 0.05, 0.5};
  PoolGeometry pool{16, 4096, 4096};
  PolicyConfig config{.step_token_budget = 256, .prefill_chunk = 256};
  auto fixed = Simulate(trace, config, pool, cost);
  auto adaptive = Simulate(trace, config, pool, cost, 1.5);
  EXPECT_EQ(adaptive.completed, 9);
  EXPECT_GT(fixed.itl_ms.p99, 18);
  EXPECT_LE(adaptive.itl_ms.p99, 1.5 * 6 + 1e-9);
  // The price: the long prompt's first token comes later.
  EXPECT_GT(adaptive.ttft_ms.p99, fixed.ttft_ms.p99);
}

TEST(SimulatorTest, AdaptiveStepBudgetFormula) {
  StepCostModel cost{2, 0.05, 0.5};
  EXPECT_EQ(AdaptiveStepBudget(cost, 8, 1.5, 1, 512), 8 + 60);
  EXPECT_EQ(AdaptiveStepBudget(cost, 0, 1.5, 1, 512), 512);   // nothing decodes
  EXPECT_EQ(AdaptiveStepBudget(cost, 8, 0, 1, 512), 512);     // off
  EXPECT_EQ(AdaptiveStepBudget(cost, 8, 1.001, 16, 512), 8 + 16);  // floor
  EXPECT_EQ(AdaptiveStepBudget(cost, 8, 100, 1, 512), 512);   // cap
  EXPECT_EQ(AdaptiveStepBudget({2, 0, 0.5}, 8, 1.5, 1, 512), 512);
}

TEST(SimulatorTest, TheItlFloorLetsShortDecodeStepsCarryPrefill) {
  StepCostModel cost{2, 0.05, 0.5};  // 8 decoding: a 6 ms decode-only step
  // Below 1.5 x 6 ms the floor changes nothing.
  EXPECT_EQ(AdaptiveStepBudget(cost, 8, 1.5, 1, 512, 0, 0, 5), 8 + 60);
  // A 20 ms floor: 14 ms of prefill at 0.05 ms a token.
  EXPECT_EQ(AdaptiveStepBudget(cost, 8, 1.5, 1, 4096, 0, 0, 20), 8 + 280);
  // One sequence decoding (2.5 ms steps): 1.25 ms of prefill by the
  // slowdown alone, 37.5 ms under a 40 ms floor (capped by the budget).
  EXPECT_EQ(AdaptiveStepBudget(cost, 1, 1.5, 1, 4096), 1 + 25);
  EXPECT_EQ(AdaptiveStepBudget(cost, 1, 1.5, 1, 4096, 0, 0, 40), 1 + 750);
  EXPECT_EQ(AdaptiveStepBudget(cost, 1, 1.5, 1, 512, 0, 0, 40), 512);
  // Off (slowdown <= 1) stays off whatever the floor.
  EXPECT_EQ(AdaptiveStepBudget(cost, 1, 0, 1, 512, 0, 0, 40), 512);
}

TEST(SimulatorTest, FitRecoversLinearCosts) {
  std::vector<StepSample> samples;
  for (int p : {0, 64, 256, 512}) {
    for (int d : {0, 1, 8, 32}) {
      if (p == 0 && d == 0) continue;
      samples.push_back({p, d, 3.0 + 0.02 * p + 0.4 * d});
    }
  }
  auto fit = FitStepCost(samples);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->fixed_ms, 3.0, 1e-6);
  EXPECT_NEAR(fit->prefill_token_ms, 0.02, 1e-9);
  EXPECT_NEAR(fit->decode_seq_ms, 0.4, 1e-9);
  EXPECT_EQ(FitStepCost({{1, 1, 1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Decode counts never vary: singular.
  EXPECT_EQ(FitStepCost({{1, 1, 1}, {2, 1, 2}, {3, 1, 3}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SimulatorTest, FitRecoversTheAttentionTerm) {
  // Prefill chunks of 256 at growing depth cost more per token: the fourth
  // column (millions of attended pairs) carries it.
  const StepCostModel truth{4.0, 1.5, 2.0, 700.0};
  std::vector<StepSample> samples;
  for (int depth : {0, 256, 768, 1536}) {
    for (int d : {0, 4, 16}) {
      const double mpairs = (256.0 * depth + 256.0 * 257 / 2 + d * 300.0) / 1e6;
      samples.push_back({256, d, truth.StepMs(256, d, mpairs), mpairs});
      samples.push_back({16, d, truth.StepMs(16, d, mpairs / 16), mpairs / 16});
    }
  }
  auto fit = FitStepCost(samples);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->attention_ms, 700.0, 1e-4);
  EXPECT_NEAR(fit->prefill_token_ms, 1.5, 1e-6);
  // Logs without the column fit the three-term model.
  auto old = ParseStepSamples("0,4,10\n64,4,20\n128,1,27\n8,16,22\n");
  ASSERT_TRUE(old.ok()) << old.status();
  auto three = FitStepCost(*old);
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->attention_ms, 0);
}

TEST(SimulatorTest, AdaptiveBudgetShrinksWithPrefillDepth) {
  // Decode step of 8 at context 1000 each: 2 + 8*0.5 + 100*8001/1e6 ms.
  const StepCostModel cost{2, 0.05, 0.5, 100};
  const double decode_ms = cost.StepMs(0, 8, 8008 / 1e6);
  const int64_t shallow = AdaptiveStepBudget(cost, 8, 1.5, 1, 4096, 8000, 0);
  const int64_t deep = AdaptiveStepBudget(cost, 8, 1.5, 1, 4096, 8000, 4000);
  EXPECT_EQ(shallow, 8 + static_cast<int64_t>(0.5 * decode_ms / 0.05));
  EXPECT_EQ(deep, 8 + static_cast<int64_t>(0.5 * decode_ms / (0.05 + 0.4)));
  EXPECT_LT(deep, shallow);
}

TEST(SimulatorTest, OnlineBudgetCapsPrefillUntilTheCostIsKnown) {
  Policy policy({.step_token_budget = 512, .prefill_chunk = 256},
                {16, 1024, 4096});
  OnlineStepCost online;
  // Nothing decodes: the whole budget.
  EXPECT_EQ(OnlineStepBudget(policy, online, 1.5, 1, 512), 512);
  ASSERT_TRUE(policy.Submit({1, 0, 8, 100}).ok());
  policy.Plan();
  policy.Commit({});
  ASSERT_EQ(policy.decoding(), 1);
  // Decoding, no fit yet: the cold-start cap.
  EXPECT_EQ(OnlineStepBudget(policy, online, 1.5, 1, 512),
            1 + kColdStartPrefillTokens);
  EXPECT_EQ(OnlineStepBudget(policy, online, 1.5, 64, 512), 1 + 64);
  EXPECT_EQ(OnlineStepBudget(policy, online, 0, 1, 512), 512);  // off
  // Once fitted: the cost model's budget.
  const StepCostModel truth{2, 0.05, 0.5};
  for (int i = 0; i < 8; ++i) {
    online.Record({i * 16, i % 3 + 1, truth.StepMs(i * 16, i % 3 + 1)});
  }
  ASSERT_TRUE(online.model().has_value());
  EXPECT_EQ(OnlineStepBudget(policy, online, 1.5, 1, 512),
            AdaptiveStepBudgetFor(policy, *online.model(), 1.5, 1, 512));
}

TEST(SimulatorTest, CatchingUpTakesTheWholeBudget) {
  Policy policy({.step_token_budget = 512, .prefill_chunk = 256},
                {16, 1024, 4096});
  ASSERT_TRUE(policy.Submit({1, 0, 8, 100}).ok());
  policy.Plan();
  policy.Commit({});
  OnlineStepCost online;
  const StepCostModel truth{2, 0.05, 0.5};
  for (int i = 0; i < 8; ++i) {
    online.Record({i * 16, i % 3 + 1, truth.StepMs(i * 16, i % 3 + 1)});
  }
  // A resumed stream waits for its next token: no throttling of the
  // recompute that gives it.
  EXPECT_EQ(SchedulerStepBudget(policy, online, 1.5, 1, 512, true), 512);
  const int64_t normal = SchedulerStepBudget(policy, online, 1.5, 1, 512, false);
  EXPECT_EQ(normal, OnlineStepBudget(policy, online, 1.5, 1, 512));
  EXPECT_LT(normal, 512);
}

TEST(SimulatorTest, PercentilesUseNearestRank) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  Percentiles p = ComputePercentiles(v);
  EXPECT_EQ(p.p50, 50);
  EXPECT_EQ(p.p90, 90);
  EXPECT_EQ(p.p99, 99);
  EXPECT_DOUBLE_EQ(p.mean, 50.5);
}

}  // namespace
}  // namespace pdserve::scheduler
