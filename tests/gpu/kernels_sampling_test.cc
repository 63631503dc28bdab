// CUDA sampling (SampleRows) against the CPU Sampler (engine/model/sampler.h)
// and the CPU's filter semantics. Checks: greedy token == CPU argmax (ties
// to the lowest id) with logprob within 2e-5 of the CPU's log-softmax; the
// same (seed, step) reproduces the token; top_k = 1 equals greedy; every
// sampled token lies in the CPU's kept set (top-k, top-p, min-p, ties by
// id); empirical frequencies of 20000 draws within 5 sigma of the
// renormalised kept probabilities.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include "engine/model/sampler.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_kernels.h"
#include "tests/gpu/kernels_test_util.h"

namespace pdserve::cuda {
namespace {

using testing::DeviceBuffer;

// Logits on a 1/64 grid: distinct values are far apart (no ulp-level
// reordering between host and device exp), equal values are exact ties.
std::vector<float> GridLogits(int64_t n, std::mt19937& rng, float spread) {
  std::normal_distribution<float> d(0.0f, spread);
  std::vector<float> v(n);
  for (float& x : v) x = std::round(d(rng) * 64.0f) / 64.0f;
  return v;
}

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

// Samples every row of `logits` (rows x vocab) with its own params.
Result Sample(const std::vector<float>& logits, int64_t vocab,
              const std::vector<SampleParams>& params) {
  const int64_t rows = static_cast<int64_t>(params.size());
  DeviceBuffer<float> d_logits(logits);
  DeviceBuffer<SampleParams> d_params(params);
  DeviceBuffer<int32_t> d_tokens(rows);
  DeviceBuffer<float> d_lp(rows);
  const cudaError_t e =
      SampleRows(d_logits.get(), rows, vocab, vocab, d_params.get(),
                 d_tokens.get(), d_lp.get(), nullptr);
  EXPECT_EQ(e, cudaSuccess) << LastErrorDetail();
  return {d_tokens.Download(), d_lp.Download()};
}

// The CPU Sampler's kept set (DrawFiltered) for one row.
std::set<int32_t> KeptSet(const float* x, int64_t vocab,
                          const SampleParams& p) {
  const float mx = *std::max_element(x, x + vocab);
  std::vector<float> w(vocab);
  for (int64_t i = 0; i < vocab; ++i) {
    w[i] = std::exp((x[i] - mx) * (1.0f / p.temperature));
  }
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return w[a] > w[b] || (w[a] == w[b] && a < b);
  });
  int64_t n = vocab;
  if (p.top_k > 0 && p.top_k < vocab) n = p.top_k;
  if (p.top_p < 1.0f) {
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) total += w[ids[i]];
    const double need = p.top_p * total;
    double acc = 0.0;
    int64_t keep = 0;
    while (keep < n && acc < need) acc += w[ids[keep++]];
    n = std::max<int64_t>(keep, 1);
  }
  std::set<int32_t> kept;
  for (int64_t i = 0; i < n; ++i) {
    if (p.min_p <= 0.0f || w[ids[i]] >= p.min_p) kept.insert(ids[i]);
  }
  if (kept.empty()) kept.insert(ids[0]);
  return kept;
}

TEST(CudaSamplingTest, GreedyMatchesCpuSampler) {
  PDSERVE_REQUIRE_GPU();
  std::mt19937 rng(1);
  for (int64_t vocab : {int64_t{1000}, int64_t{32000}, int64_t{151936}}) {
    SCOPED_TRACE(vocab);
    const int64_t rows = 4;
    std::vector<float> logits = GridLogits(rows * vocab, rng, 3.0f);
    // Row 1: a tie at the maximum (ids 7 and vocab - 2): lowest id wins.
    const float top =
        *std::max_element(logits.begin() + vocab, logits.begin() + 2 * vocab) +
        1.0f;
    logits[vocab + 7] = top;
    logits[vocab + vocab - 2] = top;
    const std::vector<SampleParams> params(rows);  // temperature 0
    const Result got = Sample(logits, vocab, params);
    for (int64_t r = 0; r < rows; ++r) {
      auto cpu = Sampler::Create(pdserve::SamplingParams{}, vocab).value();
      const auto want =
          cpu->Sample(absl::MakeConstSpan(logits.data() + r * vocab, vocab))
              .value();
      EXPECT_EQ(got.tokens[r], want.token) << "row " << r;
      EXPECT_NEAR(got.logprobs[r], want.logprob, 2e-5f) << "row " << r;
    }
    EXPECT_EQ(got.tokens[1], 7);
  }
}

TEST(CudaSamplingTest, ReproducibleAndTopK1IsGreedy) {
  PDSERVE_REQUIRE_GPU();
  std::mt19937 rng(2);
  const int64_t vocab = 5000, rows = 64;
  // Every row the same logits: tokens depend only on (seed, step).
  const std::vector<float> one = GridLogits(vocab, rng, 1.0f);
  std::vector<float> logits;
  for (int64_t r = 0; r < rows; ++r)
    logits.insert(logits.end(), one.begin(), one.end());
  std::vector<SampleParams> params(rows);
  for (int64_t r = 0; r < rows; ++r) {
    params[r].temperature = 1.0f;
    params[r].seed = 42;
    params[r].step = static_cast<uint64_t>(r % 32);  // rows r, r + 32 equal
  }
  const Result a = Sample(logits, vocab, params);
  const Result b = Sample(logits, vocab, params);
  EXPECT_EQ(a.tokens, b.tokens);
  std::set<int32_t> distinct;
  for (int64_t r = 0; r < 32; ++r) {
    EXPECT_EQ(a.tokens[r], a.tokens[r + 32]) << r;
    distinct.insert(a.tokens[r]);
  }
  EXPECT_GT(distinct.size(), 8u) << "steps should draw different tokens";
  // Another seed draws another sequence.
  for (auto& p : params) p.seed = 43;
  const Result c = Sample(logits, vocab, params);
  EXPECT_NE(a.tokens, c.tokens);

  const int32_t argmax = static_cast<int32_t>(
      std::max_element(one.begin(), one.end()) - one.begin());
  for (auto& p : params) {
    p.top_k = 1;
    p.temperature = 0.7f;
  }
  const Result k1 = Sample(logits, vocab, params);
  for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(k1.tokens[r], argmax) << r;
  // Logprob of the raw logits, whatever the filters.
  for (int64_t r = 1; r < rows; ++r) EXPECT_EQ(k1.logprobs[r], k1.logprobs[0]);
}

TEST(CudaSamplingTest, TokensStayInTheCpuKeptSet) {
  PDSERVE_REQUIRE_GPU();
  std::mt19937 rng(3);
  const int64_t vocab = 3000, rows = 256;
  struct Filter {
    float t;
    int32_t k;
    float p, min_p;
  };
  const Filter filters[] = {{1.0f, 5, 1.0f, 0.0f},    {0.8f, 0, 0.5f, 0.0f},
                            {1.5f, 0, 1.0f, 0.2f},    {1.0f, 40, 0.9f, 0.05f},
                            {0.3f, 100, 0.95f, 0.0f}, {2.0f, 3, 1.0f, 0.0f}};
  for (const Filter& f : filters) {
    SCOPED_TRACE(::testing::Message() << "T " << f.t << " k " << f.k << " p "
                                      << f.p << " min_p " << f.min_p);
    std::vector<float> one = GridLogits(vocab, rng, 2.0f);
    // Ties straddling the top-k boundary: four equal top values.
    const float top = *std::max_element(one.begin(), one.end()) + 0.5f;
    for (int32_t id : {11, 400, 1200, 2999}) one[id] = top;
    std::vector<float> logits;
    std::vector<SampleParams> params(rows);
    for (int64_t r = 0; r < rows; ++r) {
      logits.insert(logits.end(), one.begin(), one.end());
      params[r] = {f.t, f.k, f.p, f.min_p, 7, static_cast<uint64_t>(r)};
    }
    const std::set<int32_t> kept = KeptSet(one.data(), vocab, params[0]);
    const Result got = Sample(logits, vocab, params);
    std::set<int32_t> seen;
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_TRUE(kept.count(got.tokens[r]))
          << "row " << r << " drew " << got.tokens[r] << " outside the "
          << kept.size() << " kept tokens";
      seen.insert(got.tokens[r]);
    }
    if (f.k == 3) {  // the three lowest ids of the four tied maxima
      EXPECT_EQ(kept, (std::set<int32_t>{11, 400, 1200}));
      EXPECT_EQ(seen, kept) << "each of the 3 equal tokens should be drawn";
    }
  }
}

TEST(CudaSamplingTest, FrequenciesFollowTheKeptDistribution) {
  PDSERVE_REQUIRE_GPU();
  const std::vector<float> one = {0.0f,  1.0f, 2.0f, 0.5f,
                                  -1.0f, 1.5f, 0.0f, 3.0f};
  const int64_t vocab = 8, rows = 20000;
  struct Filter {
    int32_t k;
    float p, min_p;
  };
  for (const Filter& f : {Filter{0, 1.0f, 0.0f}, Filter{3, 1.0f, 0.0f},
                          Filter{0, 0.6f, 0.0f}, Filter{0, 1.0f, 0.3f}}) {
    SCOPED_TRACE(::testing::Message()
                 << "k " << f.k << " p " << f.p << " min_p " << f.min_p);
    std::vector<float> logits;
    std::vector<SampleParams> params(rows);
    for (int64_t r = 0; r < rows; ++r) {
      logits.insert(logits.end(), one.begin(), one.end());
      params[r] = {1.0f, f.k, f.p, f.min_p, 12345, static_cast<uint64_t>(r)};
    }
    const std::set<int32_t> kept = KeptSet(one.data(), vocab, params[0]);
    double z = 0.0;
    for (int32_t id : kept) z += std::exp(one[id] - 3.0);
    std::vector<int64_t> count(vocab, 0);
    for (int32_t t : Sample(logits, vocab, params).tokens) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, vocab);
      ++count[t];
    }
    for (int32_t id = 0; id < vocab; ++id) {
      const double p = kept.count(id) ? std::exp(one[id] - 3.0) / z : 0.0;
      const double sigma = std::sqrt(rows * p * (1.0 - p));
      EXPECT_NEAR(static_cast<double>(count[id]), rows * p, 5.0 * sigma + 1.0)
          << "token " << id;
    }
  }
}

TEST(CudaSamplingTest, InvalidParamsFallBackToGreedy) {
  PDSERVE_REQUIRE_GPU();
  std::mt19937 rng(4);
  const int64_t vocab = 777;
  const std::vector<float> one = GridLogits(vocab, rng, 2.0f);
  const int32_t argmax = static_cast<int32_t>(
      std::max_element(one.begin(), one.end()) - one.begin());
  std::vector<SampleParams> params = {{-1.0f, 0, 1.0f, 0.0f, 1, 1},
                                      {NAN, 0, 1.0f, 0.0f, 1, 1},
                                      {1.0f, 0, 0.0f, 0.0f, 1, 1},
                                      {1.0f, -2, 1.0f, 0.0f, 1, 1},
                                      {1.0f, 0, 1.0f, 1.5f, 1, 1}};
  std::vector<float> logits;
  for (size_t r = 0; r < params.size(); ++r) {
    logits.insert(logits.end(), one.begin(), one.end());
  }
  for (int32_t t : Sample(logits, vocab, params).tokens) EXPECT_EQ(t, argmax);
}

TEST(CudaSamplingTest, RejectsBadArguments) {
  float* fake = reinterpret_cast<float*>(uintptr_t{256});
  EXPECT_EQ(SampleRows(fake, 2, 100, 50, reinterpret_cast<SampleParams*>(fake),
                       reinterpret_cast<int32_t*>(fake), nullptr, nullptr),
            cudaErrorInvalidValue);
  EXPECT_NE(std::string(LastErrorDetail()).find("stride 50"), std::string::npos)
      << LastErrorDetail();
}

}  // namespace
}  // namespace pdserve::cuda
