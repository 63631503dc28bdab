// Sampler: each mode, reproducibility, statistics with fixed seeds.
#include "engine/model/sampler.h"

#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Sampler> Make(const SamplingParams& p, int64_t vocab) {
  auto s = Sampler::Create(p, vocab);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

// logits = log(probs): the model distribution is exactly `probs`.
std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// Frequencies of `draws` samples (a fresh sampler, no penalties).
std::vector<double> Frequencies(const SamplingParams& p,
                                const std::vector<float>& logits, int draws) {
  auto s = Make(p, logits.size());
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) {
    auto t = s->Sample(logits);
    EXPECT_TRUE(t.ok());
    f[t->token] += 1.0 / draws;
  }
  return f;
}

TEST(SamplerTest, RejectsBadParameters) {
  struct Case {
    SamplingParams p;
    const char* text;
  };
  std::vector<Case> cases;
  auto add = [&](auto set, const char* text) {
    SamplingParams p;
    set(p);
    cases.push_back({p, text});
  };
  add([](SamplingParams& p) { p.temperature = -0.5f; }, "temperature = -0.5");
  add([](SamplingParams& p) { p.temperature = NAN; }, "temperature = nan");
  add([](SamplingParams& p) { p.top_k = -1; }, "top_k = -1");
  add([](SamplingParams& p) { p.top_p = 0.0f; }, "top_p = 0 is outside its range (0, 1]");
  add([](SamplingParams& p) { p.top_p = 1.5f; }, "top_p = 1.5");
  add([](SamplingParams& p) { p.min_p = 2.0f; }, "min_p = 2");
  add([](SamplingParams& p) { p.repetition_penalty = 0.0f; },
      "repetition_penalty = 0");
  add([](SamplingParams& p) { p.presence_penalty = 3.0f; },
      "presence_penalty = 3 is outside its range [-2, 2]");
  add([](SamplingParams& p) { p.frequency_penalty = -2.5f; },
      "frequency_penalty = -2.5");
  for (const Case& c : cases) {
    absl::Status s = ValidateSamplingParams(c.p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(s.message(), HasSubstr(c.text));
    EXPECT_FALSE(Sampler::Create(c.p, 10).ok());
  }
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
  EXPECT_THAT(Sampler::Create(SamplingParams{}, 0).status().message(),
              HasSubstr("got 0"));
  auto s = Make(SamplingParams{}, 4);
  EXPECT_THAT(s->Sample(std::vector<float>(3)).status().message(),
              HasSubstr("got 3 logits for a vocabulary of 4"));
}

TEST(SamplerTest, GreedyTakesArgmaxLowestIdOnTiesAndReportsLogprob) {
  auto s = Make(SamplingParams{}, 5);
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  auto t = s->Sample(logits);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->token, 1);
  double z = 0;
  for (float l : logits) z += std::exp(l);
  EXPECT_NEAR(t->logprob, 2.0 - std::log(z), 1e-6);
  EXPECT_EQ(s->output_tokens(), 1);
}

TEST(SamplerTest, SameSeedSameTokensOtherSeedOtherTokens) {
  std::vector<float> logits(200);
  for (int i = 0; i < 200; ++i) logits[i] = std::cos(i * 0.7f);
  auto run = [&](uint64_t seed, float top_p) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_p = top_p;
    p.seed = seed;
    auto s = Make(p, 200);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s->Sample(logits)->token);
    return out;
  };
  EXPECT_EQ(run(42, 1.0f), run(42, 1.0f));
  EXPECT_EQ(run(42, 0.8f), run(42, 0.8f));
  EXPECT_NE(run(42, 1.0f), run(43, 1.0f));
}

// Logits that depend on the history (a stand-in for a model): the next
// distribution moves with the last token.
std::vector<float> HistoryLogits(const std::vector<int32_t>& tokens,
                                 int32_t vocab) {
  std::vector<float> l(vocab);
  const int32_t last = tokens.empty() ? 0 : tokens.back();
  for (int32_t i = 0; i < vocab; ++i) {
    l[i] = 2.0f * std::cos(0.37f * static_cast<float>(i) +
                           0.11f * static_cast<float>(last));
  }
  return l;
}

// Samples `n` tokens after `tokens` (prompt + `resumed` generated ones),
// appending them.
void Continue(const SamplingParams& p, int32_t vocab, int64_t resumed, int n,
              std::vector<int32_t>* tokens) {
  auto s = Make(p, vocab);
  s->AddPrompt(*tokens, resumed);
  EXPECT_EQ(s->position(), static_cast<int64_t>(tokens->size()));
  for (int i = 0; i < n; ++i) {
    auto t = s->Sample(HistoryLogits(*tokens, vocab));
    ASSERT_TRUE(t.ok()) << t.status();
    tokens->push_back(t->token);
  }
}

TEST(SamplerTest, RestartAtAnyPositionDrawsTheSameTokens) {
  constexpr int32_t kVocab = 97;
  constexpr int kTokens = 40;
  const std::vector<int32_t> prompt = {5, 17, 3, 60, 5};
  SamplingParams plain;
  plain.temperature = 1.0f;
  plain.seed = 1234;
  SamplingParams filtered = plain;
  filtered.top_k = 40;
  filtered.top_p = 0.9f;
  filtered.min_p = 0.02f;
  SamplingParams penalised = filtered;  // output history matters here
  penalised.repetition_penalty = 1.3f;
  penalised.frequency_penalty = 0.7f;
  penalised.presence_penalty = 0.4f;
  for (const SamplingParams& p : {plain, filtered, penalised}) {
    std::vector<int32_t> straight = prompt;
    Continue(p, kVocab, 0, kTokens, &straight);
    for (int k : {1, 2, 9, 25, kTokens - 1}) {
      std::vector<int32_t> resumed(straight.begin(),
                                   straight.begin() + prompt.size() + k);
      Continue(p, kVocab, k, kTokens - k, &resumed);
      EXPECT_EQ(resumed, straight) << "restarted at " << k;
    }
    // Without its outputs marked as such, the penalised restart would be
    // penalised differently (the test above can fail).
    if (p.frequency_penalty != 0.0f) {
      int differ = 0;
      for (int k : {9, 25}) {
        std::vector<int32_t> wrong(straight.begin(),
                                   straight.begin() + prompt.size() + k);
        Continue(p, kVocab, 0, kTokens - k, &wrong);
        differ += wrong != straight;
      }
      EXPECT_GT(differ, 0);
    }
    // Another seed is another stream.
    SamplingParams other = p;
    other.seed = 1235;
    std::vector<int32_t> b = prompt;
    Continue(other, kVocab, 0, kTokens, &b);
    EXPECT_NE(b, straight);
  }
}

TEST(SamplerTest, TheDrawIsKeyedByPositionNotByCallCount) {
  // Position 10 of one sequence: the same token whether it is the first
  // sample of a sampler that was given a 10-token prompt or the eleventh of
  // one that started empty (identical logits every time).
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 99;
  std::vector<float> logits(300);
  for (int i = 0; i < 300; ++i) logits[i] = std::sin(i * 0.3f);
  auto a = Make(p, 300);
  std::vector<int32_t> through;
  for (int i = 0; i < 30; ++i) through.push_back(a->Sample(logits)->token);
  for (int k : {0, 10, 29}) {
    auto b = Make(p, 300);
    b->AddPrompt(std::vector<int32_t>(k, 1));
    EXPECT_EQ(b->Sample(logits)->token, through[k]) << k;
  }
}

TEST(SamplerTest, TemperatureFollowsTheTemperedSoftmax) {
  const std::vector<double> probs = {0.5, 0.25, 0.15, 0.1};
  for (float temp : {1.0f, 0.5f, 2.0f}) {
    SamplingParams p;
    p.temperature = temp;
    p.seed = 7;
    const int draws = 40000;
    std::vector<double> f = Frequencies(p, LogitsOf(probs), draws);
    std::vector<double> want(4);
    double z = 0;
    for (int i = 0; i < 4; ++i) z += want[i] = std::pow(probs[i], 1.0 / temp);
    for (int i = 0; i < 4; ++i) {
      want[i] /= z;
      // 5 standard deviations of a binomial frequency.
      const double sd = std::sqrt(want[i] * (1 - want[i]) / draws);
      EXPECT_NEAR(f[i], want[i], 5 * sd) << "temperature " << temp << " id "
                                         << i;
    }
  }
}

TEST(SamplerTest, TopKKeepsTheKMostLikely) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  p.seed = 11;
  std::vector<double> f =
      Frequencies(p, LogitsOf({0.1, 0.4, 0.2, 0.3}), 20000);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_EQ(f[2], 0.0);
  EXPECT_NEAR(f[1], 4.0 / 7.0, 0.02);
  EXPECT_NEAR(f[3], 3.0 / 7.0, 0.02);
}

TEST(SamplerTest, TopPKeepsTheSmallestPrefixWithTheMass) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.7f;  // 0.5 + 0.3 >= 0.7: {0, 1}
  p.seed = 5;
  std::vector<double> f =
      Frequencies(p, LogitsOf({0.5, 0.3, 0.15, 0.05}), 20000);
  EXPECT_NEAR(f[0], 5.0 / 8.0, 0.02);
  EXPECT_NEAR(f[1], 3.0 / 8.0, 0.02);
  EXPECT_EQ(f[2] + f[3], 0.0);
}

TEST(SamplerTest, TopPOnALargeVocabularyMatchesBruteForce) {
  // Exercises the growing partial sort: the nucleus holds ~hundreds of ids.
  const int vocab = 50000;
  // Geometric weights exp(-0.008 rank) over a shuffled vocabulary: the 0.9
  // nucleus holds ~288 ids.
  std::vector<int> rank(vocab);
  std::iota(rank.begin(), rank.end(), 0);
  std::shuffle(rank.begin(), rank.end(), std::mt19937(1));
  std::vector<float> logits(vocab);
  for (int i = 0; i < vocab; ++i) logits[i] = -0.008f * rank[i];
  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  double z = 0;
  for (float l : logits) z += std::exp(double(l) - logits[order[0]]);
  std::set<int> nucleus;
  double acc = 0;
  for (int id : order) {
    if (acc >= 0.9 * z) break;
    acc += std::exp(double(logits[id]) - logits[order[0]]);
    nucleus.insert(id);
  }
  ASSERT_GT(nucleus.size(), 256u);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  p.seed = 9;
  auto s = Make(p, vocab);
  SamplerScratch scratch;
  std::set<int> seen;
  for (int i = 0; i < 600; ++i) {
    const int t = s->Sample(logits, &scratch)->token;
    ASSERT_TRUE(nucleus.count(t)) << "token " << t << " outside the nucleus";
    seen.insert(t);
  }
  EXPECT_LT(nucleus.size(), 400u);
  EXPECT_GT(seen.size(), nucleus.size() / 3);
}

TEST(SamplerTest, MinPDropsTokensBelowTheScaledMax) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.4f;  // keep p >= 0.2
  p.seed = 13;
  std::vector<double> f =
      Frequencies(p, LogitsOf({0.5, 0.25, 0.15, 0.1}), 20000);
  EXPECT_NEAR(f[0], 2.0 / 3.0, 0.02);
  EXPECT_NEAR(f[1], 1.0 / 3.0, 0.02);
  EXPECT_EQ(f[2] + f[3], 0.0);
}

TEST(SamplerTest, RepetitionPenaltyCoversPromptAndOutput) {
  SamplingParams p;
  p.repetition_penalty = 1.25f;  // greedy
  auto s = Make(p, 4);
  std::vector<int32_t> prompt = {0};
  s->AddPrompt(prompt);
  // 2.0 / 1.25 = 1.6 < 1.9: token 1 wins.
  EXPECT_EQ(s->Sample(std::vector<float>{2.0f, 1.9f, 0, 0})->token, 1);
  // Negative logits are multiplied: token 1 was output, -1 * 1.25 < -1.1.
  EXPECT_EQ(s->Sample(std::vector<float>{-5, -1.0f, -1.1f, -9})->token, 2);
  // The logprob is of the raw logits, not the penalised ones.
  auto t = s->Sample(std::vector<float>{0, 0, 0, 1.0f});
  EXPECT_EQ(t->token, 3);
  EXPECT_NEAR(t->logprob, 1.0 - std::log(3 + std::exp(1.0)), 1e-6);
}

TEST(SamplerTest, FrequencyAndPresencePenalisesOutputTokensOnly) {
  SamplingParams p;
  p.frequency_penalty = 0.3f;
  p.presence_penalty = 0.5f;
  auto s = Make(p, 3);
  std::vector<int32_t> prompt = {1};
  s->AddPrompt(prompt);  // prompt tokens are not penalised by these two
  const std::vector<float> logits = {3.0f, 2.95f, 1.0f};
  std::vector<int32_t> out;
  for (int i = 0; i < 4; ++i) out.push_back(s->Sample(logits)->token);
  // 0 (3.0) -> penalised to 2.2 -> 1 (2.95) -> 1 now 2.15, 0 2.2 -> 0
  // (count 2: 3.0 - 0.6 - 0.5 = 1.9) -> 1 (2.15).
  EXPECT_EQ(out, (std::vector<int32_t>{0, 1, 0, 1}));
}

TEST(SamplerTest, SharedScratchServesSeveralSamplers) {
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 3;
  SamplerScratch scratch(8);
  std::vector<float> logits = {1, 2, 3, 4, 5, 6, 7, 8};
  for (uint64_t seed = 0; seed < 4; ++seed) {
    p.seed = seed;
    auto a = Make(p, 8);
    auto b = Make(p, 8);
    for (int i = 0; i < 20; ++i) {
      const int32_t ta = a->Sample(logits, &scratch)->token;
      EXPECT_GE(ta, 5);
      EXPECT_EQ(ta, b->Sample(logits)->token);  // own scratch, same draws
    }
  }
}

TEST(SamplerTest, LogitBiasShiftsGreedyAndIsValidated) {
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.5f};
  SamplingParams p;
  p.logit_bias = {{2, 2.5f}};  // 1.0 + 2.5 = 3.5 beats 3.0
  auto s = Make(p, 4);
  auto t = s->Sample(logits);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->token, 2);
  // The reported logprob is the raw model's, unbiased.
  EXPECT_NEAR(t->logprob, 1.0f - LogSumExp(logits.data(), 4), 1e-5);
  p.logit_bias = {{0, -100.0f}};
  EXPECT_EQ(Make(p, 4)->Sample(logits)->token, 1);
  // A -100 bias removes a token from temperature sampling too.
  p.temperature = 1.0f;
  auto hot = Make(p, 4);
  for (int i = 0; i < 200; ++i) EXPECT_NE(hot->Sample(logits)->token, 0);

  SamplingParams bad;
  bad.logit_bias = {{1, 100.5f}};
  EXPECT_THAT(std::string(Sampler::Create(bad, 4).status().message()),
              HasSubstr("logit_bias[1] = 100.5 is outside its range [-100, 100]"));
  bad.logit_bias = {{4, 1.0f}};
  EXPECT_THAT(std::string(Sampler::Create(bad, 4).status().message()),
              HasSubstr("logit_bias names token 4, outside the vocabulary [0, 4)"));
}

TEST(SamplerTest, TopLogprobsAreTheMostLikelyTokensOfTheRawDistribution) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::vector<float> logits(1000);
  for (float& v : logits) v = u(rng);
  logits[17] = logits[18] = 9.0f;  // a tie: the lower id first
  SamplingParams p;
  p.top_logprobs = 5;
  p.temperature = 0.8f;
  p.repetition_penalty = 1.3f;  // adjusted sampling, raw alternatives
  p.seed = 3;
  auto s = Make(p, logits.size());
  auto t = s->Sample(logits);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->num_top, 5);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const float log_z = LogSumExp(logits.data(), 1000);
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(t->top[k].token, order[k]) << k;
    EXPECT_NEAR(t->top[k].logprob, logits[order[k]] - log_z, 1e-5) << k;
  }
  EXPECT_EQ(t->top[0].token, 17);
  EXPECT_EQ(t->top[1].token, 18);
  // More alternatives than the vocabulary: all of them.
  p.top_logprobs = 20;
  auto small = Make(p, 3);
  EXPECT_EQ(small->Sample(std::vector<float>{1, 2, 3})->num_top, 3);
  p.top_logprobs = 21;
  EXPECT_THAT(std::string(Sampler::Create(p, 3).status().message()),
              HasSubstr("top_logprobs = 21 is outside its range [0, 20]"));
  p.top_logprobs = 0;
  EXPECT_EQ(Make(p, 3)->Sample(std::vector<float>{1, 2, 3})->num_top, 0);
}

}  // namespace
}  // namespace pdserve
