// Numerical parity with Hugging Face transformers (fixtures made by
// tests/tools/make_parity_fixtures.py): every logit of a 16-token prefill and
// 16 greedy decode steps within 1e-4 for random fp32 Llama / Qwen3 models
// and the real stories260K checkpoint (loaded from its original llama2.c
// file); for SmolLM2-135M-Instruct Q4_1 the same top-1 token at each of 32
// greedy steps, printing the largest logit difference.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "engine/loader/model_loader.h"
#include "engine/model/forward.h"
#include "gtest/gtest.h"
#include "kernels/thread_pool.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

const std::string kParityDir = std::string(PDSERVE_TESTDATA_DIR) + "/parity";

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

std::vector<float> ReadF32(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  EXPECT_TRUE(in.good()) << path;
  const auto bytes = static_cast<size_t>(in.tellg());
  std::vector<float> out(bytes / 4);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(out.data()), bytes);
  return out;
}

int32_t Argmax(const float* x, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

// One sequence on a loaded model: prefill, then single-token decode steps.
class Runner {
 public:
  explicit Runner(const ModelWeights& w, int64_t max_tokens = 64)
      : w_(w),
        kv_(w.config.num_layers, w.config.kv_dim(), 16, 16),
        pool_(2),
        pages_(16) {
    std::iota(pages_.begin(), pages_.end(), 0);
    auto fp = ForwardPass::Create(w, kv_, pool_, max_tokens);
    EXPECT_TRUE(fp.ok()) << fp.status();
    fp_ = std::move(*fp);
  }
  // Feeds `tokens` at the current position; returns all or the last logits.
  std::vector<float> Feed(const std::vector<int32_t>& tokens, bool all) {
    SequenceSpan span{tokens, pos_, pages_, 0, all};
    std::vector<float> logits(span.logit_rows() * w_.config.vocab_size);
    absl::Status s = fp_->Run({&span, 1}, absl::MakeSpan(logits));
    EXPECT_TRUE(s.ok()) << s;
    pos_ += static_cast<int64_t>(tokens.size());
    return logits;
  }

 private:
  const ModelWeights& w_;
  KvStorage kv_;
  ThreadPool pool_;
  std::vector<int32_t> pages_;
  std::unique_ptr<ForwardPass> fp_;
  int64_t pos_ = 0;
};

// The fp32 fixtures: prefill all-logits then greedy decode, all within 1e-4.
void CheckFp32Parity(const std::string& model_path,
                     const std::string& fixture_dir) {
  auto weights = LoadModel(model_path);
  ASSERT_TRUE(weights.ok()) << weights.status();
  const nlohmann::json meta = ReadJson(fixture_dir + "/expected.json");
  const std::vector<float> expected =
      ReadF32(fixture_dir + "/" + meta["logits_file"].get<std::string>());
  const int64_t vocab = meta["vocab_size"];
  ASSERT_EQ((*weights)->config.vocab_size, vocab);
  const auto prompt = meta["prompt_ids"].get<std::vector<int32_t>>();
  const auto decode = meta["decode_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(expected.size(), (prompt.size() + decode.size()) * vocab);

  Runner run(**weights);
  std::vector<float> got = run.Feed(prompt, /*all=*/true);
  float max_diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(got[i] - expected[i]));
    ASSERT_NEAR(got[i], expected[i], 1e-4)
        << "prefill row " << i / vocab << " logit " << i % vocab;
  }
  std::vector<float> last(got.end() - vocab, got.end());
  for (size_t k = 0; k < decode.size(); ++k) {
    ASSERT_EQ(Argmax(last.data(), vocab), decode[k]) << "decode step " << k;
    last = run.Feed({decode[k]}, false);
    const float* want = expected.data() + (prompt.size() + k) * vocab;
    for (int64_t i = 0; i < vocab; ++i) {
      max_diff = std::max(max_diff, std::fabs(last[i] - want[i]));
      ASSERT_NEAR(last[i], want[i], 1e-4)
          << "decode step " << k << " logit " << i;
    }
  }
  std::printf("%s: largest logit difference %.3g over %zu rows\n",
              model_path.c_str(), max_diff, prompt.size() + decode.size());
}

TEST(ModelParityTest, TinyLlamaMatchesTransformers) {
  CheckFp32Parity(kParityDir + "/tiny_llama", kParityDir + "/tiny_llama");
}

TEST(ModelParityTest, TinyQwen3MatchesTransformers) {
  CheckFp32Parity(kParityDir + "/tiny_qwen3", kParityDir + "/tiny_qwen3");
}

TEST(ModelParityTest, Stories260KMatchesTransformers) {
  const std::string bin =
      std::string(PDSERVE_SHARED_DIR) + "/models/stories260K/stories260K.bin";
  if (!std::filesystem::exists(bin)) GTEST_SKIP() << bin << " absent";
  CheckFp32Parity(bin, kParityDir + "/stories260K");
}

std::string CacheDir() {
  if (const char* c = std::getenv("PDSERVE_CACHE")) return c;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/pdserve";
}

TEST(ModelParityTest, SmolLM2Q4_1GreedyTop1MatchesTransformers) {
  const nlohmann::json meta = ReadJson(kParityDir + "/smollm2_q4_1.json");
  const std::string path =
      CacheDir() + "/models/" + meta["model"].get<std::string>();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
  auto weights = LoadModel(path);
  ASSERT_TRUE(weights.ok()) << weights.status();
  const int64_t vocab = (*weights)->config.vocab_size;
  const auto prompt = meta["prompt_ids"].get<std::vector<int32_t>>();
  const auto greedy = meta["greedy_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(greedy.size(), 32u);

  Runner run(**weights);
  std::vector<float> last = run.Feed(prompt, false);
  float max_diff = 0;
  for (size_t k = 0; k < greedy.size(); ++k) {
    const nlohmann::json& step = meta["steps"][k];
    const auto ids = step["top_ids"].get<std::vector<int32_t>>();
    const auto want = step["top_logits"].get<std::vector<float>>();
    for (size_t j = 0; j < ids.size(); ++j) {
      max_diff = std::max(max_diff, std::fabs(last[ids[j]] - want[j]));
    }
    ASSERT_EQ(Argmax(last.data(), vocab), greedy[k]) << "step " << k;
    last = run.Feed({greedy[k]}, false);
  }
  std::printf("SmolLM2 Q4_1: top-1 equal at all %zu steps; largest logit "
              "difference (reference top-8 ids) %.4f\n",
              greedy.size(), max_diff);
  ::testing::Test::RecordProperty("max_logit_diff", std::to_string(max_diff));
  // 8-bit activation rounding only: the same file dequantized to F32 matches
  // to < 1e-3, and llama.cpp on this fixture is off by up to 1.16 (measured
  // with llama-cpp-python 0.3.36); a wrong model would be off by far more.
  EXPECT_LT(max_diff, 2.0f);
}

}  // namespace
}  // namespace pdserve
