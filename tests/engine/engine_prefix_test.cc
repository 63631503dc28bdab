// EngineCore with automatic prefix caching: a sequence whose prompt starts
// with pages an earlier sequence wrote gets the same greedy tokens and
// log-probabilities as on an engine without the cache, computes only its
// uncached tail, and plans (which know nothing of the cache) stay valid:
// chunks over cached tokens advance without compute. Also under pool
// pressure (cached pages reclaimed) and with two sharers in one batch.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include "engine/core/engine_core.h"
#include "engine/model/sampler.h"
#include "gtest/gtest.h"
#include "kernels/thread_pool.h"
#include "tests/engine/engine_core_test_util.h"

namespace pdserve {
namespace {

struct SeqRun {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  int64_t computed = 0;  // tokens the engine processed
  int64_t steps = 0;
};

// Every KV dtype: cached pages hold the dtype's bytes, reused as they are.
class EnginePrefixTest : public ::testing::TestWithParam<KvDType> {
 protected:
  std::unique_ptr<EngineCore> Make(bool prefix_cache, int64_t kv_bytes) {
    EngineOptions o;
    o.kv_memory = {.bytes = kv_bytes};
    o.max_sequences = 8;
    o.max_step_tokens = 256;
    o.page_size = 16;
    o.prefix_cache = prefix_cache;
    o.kv_dtype = GetParam();
    auto e = EngineCore::Create(model_, &threads_, std::move(o));
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }

  // Runs each (id, prompt) in `seqs` together, prefill chunks of `chunk`
  // as a scheduler plans them (from its own count, ignorant of the cache),
  // greedy, `max_new` tokens each; releases them at the end.
  std::vector<SeqRun> Play(EngineCore& e,
                           const std::vector<std::vector<int32_t>>& prompts,
                           SequenceId first_id, int chunk, int max_new) {
    std::vector<SeqRun> runs(prompts.size());
    std::vector<int64_t> planned(prompts.size(), 0);
    std::vector<bool> done(prompts.size(), false);
    SamplingParams greedy;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const int64_t capacity =
          std::min<int64_t>(512, e.Geometry().total_tokens);
      EXPECT_TRUE(
          e.AddSequence(first_id + i, prompts[i], capacity, greedy, {}, max_new)
              .ok());
    }
    StepResult r;
    while (std::find(done.begin(), done.end(), false) != done.end()) {
      std::vector<StepPlanEntry> plan;
      for (size_t i = 0; i < prompts.size(); ++i) {
        if (done[i]) continue;
        const int64_t left =
            static_cast<int64_t>(prompts[i].size()) - planned[i];
        const int32_t n =
            static_cast<int32_t>(left > 0 ? std::min<int64_t>(chunk, left) : 1);
        planned[i] += n;
        plan.push_back({first_id + i, n});
      }
      absl::Status s = e.Step(plan, &r);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok()) break;
      for (const SequenceStepResult& out : r.sequences) {
        SeqRun& run = runs[out.id - first_id];
        run.computed += out.tokens_processed;
        ++run.steps;
        EXPECT_EQ(out.next_pos,
                  std::min<int64_t>(
                      planned[out.id - first_id],
                      static_cast<int64_t>(prompts[out.id - first_id].size()) +
                          static_cast<int64_t>(run.tokens.size())));
        if (out.has_token) {
          run.tokens.push_back(out.token);
          run.logprobs.push_back(out.logprob);
        }
        if (out.finish != FinishReason::kNone) done[out.id - first_id] = true;
      }
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_TRUE(e.Release(first_id + i).ok());
    }
    return runs;
  }

  static void ExpectSameOutput(const SeqRun& a, const SeqRun& b) {
    EXPECT_EQ(a.tokens, b.tokens);
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
    for (size_t i = 0; i < a.logprobs.size(); ++i) {
      EXPECT_NEAR(a.logprobs[i], b.logprobs[i], 1e-4f) << i;
    }
  }

  std::vector<int32_t> Tokens(int n, int salt) const {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t[i] = 3 + (i * 31 + salt * 17) % 90;
    return t;
  }

  std::shared_ptr<const ModelWeights> model_ = testing_util::TinyRandomModel(7);
  ThreadPool threads_{2};
};

TEST_P(EnginePrefixTest, SharedPrefixGivesTheSameOutputAndSkipsItsCompute) {
  auto cached = Make(true, 8 << 20);
  auto plain = Make(false, 8 << 20);
  ASSERT_TRUE(cached && plain);
  const std::vector<int32_t> first = Tokens(70, 1);
  std::vector<int32_t> second(first.begin(), first.begin() + 50);
  const std::vector<int32_t> tail = Tokens(23, 2);
  second.insert(second.end(), tail.begin(), tail.end());  // 73 tokens

  for (EngineCore* e : {cached.get(), plain.get()}) {
    Play(*e, {first}, 1, 16, 6);
  }
  const SeqRun with = Play(*cached, {second}, 10, 16, 8)[0];
  const SeqRun without = Play(*plain, {second}, 10, 16, 8)[0];
  ExpectSameOutput(with, without);
  // 50 shared tokens = 3 full pages of 16 (48 tokens) from the cache.
  EXPECT_EQ(without.computed, 73 + 7);
  EXPECT_EQ(with.computed, 73 - 48 + 7);
  EXPECT_EQ(with.steps, without.steps);  // the plan is the same
  const EngineStats s = cached->Stats();
  EXPECT_EQ(s.prefix_query_tokens, 70 + 73);
  EXPECT_EQ(s.prefix_hit_tokens, 48);
  EXPECT_EQ(plain->Stats().prefix_hit_tokens, 0);
  EXPECT_EQ(s.pool.free_pages, s.pool.total_pages);  // cached pages are free
  EXPECT_GT(s.pool.cached_pages, 0);

  // The same prompt again: every page but the one holding its last token.
  const SeqRun again = Play(*cached, {second}, 20, 64, 8)[0];
  ExpectSameOutput(again, without);
  EXPECT_EQ(again.computed, 73 - 64 + 7);
}

TEST_P(EnginePrefixTest, TwoSharersInOneBatchAndAChunkOfOnlyCachedTokens) {
  auto cached = Make(true, 8 << 20);
  auto plain = Make(false, 8 << 20);
  ASSERT_TRUE(cached && plain);
  const std::vector<int32_t> system = Tokens(64, 3);
  auto with_question = [&](int salt, int n) {
    std::vector<int32_t> p = system;
    const std::vector<int32_t> q = Tokens(n, salt);
    p.insert(p.end(), q.begin(), q.end());
    return p;
  };
  for (EngineCore* e : {cached.get(), plain.get()}) {
    Play(*e, {system}, 1, 32, 2);  // writes and indexes pages 0-3
  }
  const std::vector<std::vector<int32_t>> prompts = {with_question(4, 9),
                                                     with_question(5, 30)};
  // Chunks of 8: the first eight chunks of each cover only cached tokens.
  const std::vector<SeqRun> with = Play(*cached, prompts, 10, 8, 5);
  const std::vector<SeqRun> without = Play(*plain, prompts, 10, 8, 5);
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(i);
    ExpectSameOutput(with[i], without[i]);
    EXPECT_EQ(with[i].computed,
              static_cast<int64_t>(prompts[i].size()) - 64 + 4);
  }
}

// A scheduler told the cached length (CachedPrefixTokens) plans them all in
// one entry beside a real chunk: only the computed tokens count against
// max_step_tokens (256 here), so a 300-token cached prefix fits one step.
TEST_P(EnginePrefixTest, CachedTokensDoNotCountAgainstTheStepLimit) {
  auto e = Make(true, 8 << 20);
  ASSERT_NE(e, nullptr);
  const std::vector<int32_t> system = Tokens(320, 8);
  Play(*e, {system}, 1, 160, 1);
  std::vector<int32_t> prompt = system;
  prompt.push_back(5);
  SamplingParams greedy;
  ASSERT_TRUE(e->AddSequence(2, prompt, 512, greedy, {}, 4).ok());
  EXPECT_EQ(e->CachedPrefixTokens(2), 320);
  EXPECT_EQ(e->CachedPrefixTokens(99), 0);
  StepResult r;
  ASSERT_TRUE(e->Step({{2, 321}}, &r).ok());  // 320 cached + 1 computed
  EXPECT_TRUE(r.sequences[0].has_token);
  EXPECT_EQ(r.sequences[0].tokens_processed, 1);
  EXPECT_EQ(e->CachedPrefixTokens(2), 0);
  ASSERT_TRUE(e->Release(2).ok());
  // Without the cache the same entry is over the limit.
  ASSERT_TRUE(e->AddSequence(3, Tokens(321, 9), 512, greedy, {}, 4).ok());
  EXPECT_EQ(e->Step({{3, 321}}, &r).message(),
            "step plan holds 321 tokens to compute; the engine's limit is "
            "max_step_tokens=256");
}

TEST_P(EnginePrefixTest, CachedPagesAreReclaimedUnderPressure) {
  // A pool of few pages: the second prompt needs pages the first left
  // cached; the prefix of the first is then gone, and outputs still match.
  const int64_t page_bytes =
      2 * 2 * 16 * 16 * 4;  // layers, k+v, tokens, kv_dim
  auto cached = Make(true, 12 * std::max<int64_t>(page_bytes, 4096));
  auto plain = Make(false, 12 * std::max<int64_t>(page_bytes, 4096));
  ASSERT_TRUE(cached && plain);
  const int64_t pages = cached->Geometry().num_pages;
  ASSERT_GE(pages, 8);
  const std::vector<int32_t> a = Tokens(static_cast<int>(pages * 16 / 2), 6);
  const std::vector<int32_t> b = Tokens(static_cast<int>(pages * 16 - 40), 7);
  for (EngineCore* e : {cached.get(), plain.get()}) Play(*e, {a}, 1, 32, 4);
  ExpectSameOutput(Play(*cached, {b}, 10, 32, 4)[0],
                   Play(*plain, {b}, 10, 32, 4)[0]);
  const SeqRun again_with = Play(*cached, {a}, 20, 32, 4)[0];
  const SeqRun again_without = Play(*plain, {a}, 20, 32, 4)[0];
  ExpectSameOutput(again_with, again_without);
  EXPECT_LT(cached->Stats().prefix_hit_tokens,
            static_cast<int64_t>(a.size()) - 16);
}

INSTANTIATE_TEST_SUITE_P(
    KvDTypes, EnginePrefixTest,
    ::testing::Values(KvDType::kF32, KvDType::kF16, KvDType::kBF16),
    [](const ::testing::TestParamInfo<KvDType>& i) {
      return std::string(KvDTypeName(i.param));
    });

}  // namespace
}  // namespace pdserve
