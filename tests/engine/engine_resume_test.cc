// A sequence restarted from prompt + generated-so-far (the scheduler's
// resume by recompute) produces the same tokens through EngineCore as the
// uninterrupted run: greedy, and seeded sampling (temperature, top-k/top-p/
// min-p), because the sampler's draw for a token is a pure function of
// (seed, position). On a real model: stories260K from the shared folder and
// SmolLM2-135M Q4_1 (the default model) when cached. Another seed (what an
// unseeded request gets from the front end) gives another continuation.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/engine_core.h"
#include "engine/loader/model_loader.h"
#include "engine/model/sampler.h"
#include "gtest/gtest.h"
#include "kernels/thread_pool.h"
#include "tests/engine/engine_core_test_util.h"

namespace pdserve {
namespace {

std::shared_ptr<const ModelWeights> Load(const std::string& path) {
  return testing_util::LoadModelFile(path);
}

std::shared_ptr<const ModelWeights> LoadStories() {
  return Load(std::string(PDSERVE_SHARED_DIR) +
              "/models/stories260K/stories260K.bin");
}

std::shared_ptr<const ModelWeights> LoadSmolLm2() {
  const char* cache = std::getenv("PDSERVE_CACHE");
  const char* home = std::getenv("HOME");
  const std::string dir =
      cache != nullptr && *cache != '\0'
          ? std::string(cache)
          : std::string(home != nullptr ? home : ".") + "/.cache/pdserve";
  return Load(dir + "/models/SmolLM2-135M-Instruct.Q4_1.gguf");
}

class EngineResumeTest : public ::testing::Test {
 protected:
  void Open(std::shared_ptr<const ModelWeights> w) {
    vocab_ = w->config.vocab_size;
    EngineOptions o;
    o.kv_memory = {.bytes = 64 << 20};
    o.max_sequences = 8;
    o.max_step_tokens = 512;
    absl::StatusOr<std::unique_ptr<EngineCore>> e =
        EngineCore::Create(std::move(w), &threads_, std::move(o));
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = std::move(*e);
  }

  // Admits `prompt` as `id`, prefills it in chunks of `chunk` and decodes
  // `max_new` tokens (no stop ids); returns them.
  std::vector<int32_t> Run(SequenceId id, const std::vector<int32_t>& prompt,
                           const SamplingParams& p, int64_t max_new,
                           int chunk) {
    absl::Status added = engine_->AddSequence(id, prompt, 256, p, {}, max_new);
    EXPECT_TRUE(added.ok()) << added;
    std::vector<int32_t> out;
    if (!added.ok()) return out;
    StepResult r;
    int64_t pos = 0;
    for (;;) {
      const int64_t left = static_cast<int64_t>(prompt.size()) - pos;
      const int32_t n =
          static_cast<int32_t>(left > 0 ? std::min<int64_t>(chunk, left) : 1);
      absl::Status s = engine_->Step({{id, n}}, &r);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok()) break;
      pos = r.sequences[0].next_pos;
      if (r.sequences[0].has_token) out.push_back(r.sequences[0].token);
      if (r.sequences[0].finish != FinishReason::kNone) break;
    }
    EXPECT_TRUE(engine_->Release(id).ok());
    return out;
  }

  // The uninterrupted run, then restarts at several positions k: the
  // restart's prompt is prompt + the first k tokens, its budget the rest.
  void CheckResumes(const SamplingParams& p) {
    const std::vector<int32_t> prompt =
        testing_util::RandomTokens(23, vocab_, 11);
    constexpr int kNew = 32;
    const std::vector<int32_t> straight = Run(1, prompt, p, kNew, 8);
    ASSERT_EQ(straight.size(), static_cast<size_t>(kNew));
    SequenceId id = 2;
    for (int k : {1, 5, 16, kNew - 1}) {
      std::vector<int32_t> resumed_prompt = prompt;
      resumed_prompt.insert(resumed_prompt.end(), straight.begin(),
                            straight.begin() + k);
      // Another prefill chunking than the first run's, as after a restart.
      const std::vector<int32_t> rest =
          Run(id++, resumed_prompt, p, kNew - k, 13);
      EXPECT_EQ(rest, std::vector<int32_t>(straight.begin() + k,
                                           straight.end()))
          << "restarted at " << k;
    }
  }

  // Seeded sampling that is not greedy, and another seed gives other tokens.
  void CheckSampledResumes() {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = 20261202;
    CheckResumes(p);
    SamplingParams filtered = p;
    filtered.top_k = 50;
    filtered.top_p = 0.95f;
    filtered.min_p = 0.01f;
    CheckResumes(filtered);
    const std::vector<int32_t> prompt =
        testing_util::RandomTokens(23, vocab_, 11);
    const std::vector<int32_t> a = Run(50, prompt, p, 32, 8);
    SamplingParams other = p;
    other.seed = p.seed + 1;
    EXPECT_NE(Run(51, prompt, other, 32, 8), a);
    EXPECT_EQ(Run(52, prompt, p, 32, 8), a);
  }

  ThreadPool threads_{2};
  int64_t vocab_ = 0;
  std::unique_ptr<EngineCore> engine_;
};

TEST_F(EngineResumeTest, Stories260KGreedyResumesExactly) {
  std::shared_ptr<const ModelWeights> w = LoadStories();
  if (w == nullptr) GTEST_SKIP() << "stories260K not available";
  Open(w);
  CheckResumes(SamplingParams{});
}

TEST_F(EngineResumeTest, Stories260KSeededSamplingResumesExactly) {
  std::shared_ptr<const ModelWeights> w = LoadStories();
  if (w == nullptr) GTEST_SKIP() << "stories260K not available";
  Open(w);
  CheckSampledResumes();
}

TEST_F(EngineResumeTest, SmolLm2SeededSamplingResumesExactly) {
  std::shared_ptr<const ModelWeights> w = LoadSmolLm2();
  if (w == nullptr) GTEST_SKIP() << "SmolLM2 Q4_1 not in the cache";
  Open(w);
  CheckResumes(SamplingParams{});
  CheckSampledResumes();
}

}  // namespace
}  // namespace pdserve
