// Numerical parity with Hugging Face transformers (fixtures made by
// tests/tools/make_parity_fixtures.py): every logit of a 16-token prefill and
// 16 greedy decode steps within 1e-4 for random fp32 Llama / Qwen3 models
// and the real stories260K checkpoint (loaded from its original llama2.c
// file); for SmolLM2-135M-Instruct Q4_1 the same top-1 token at each of 32
// greedy steps, printing the largest logit difference. With the 16- and
// 8-bit KV caches (--kv-dtype bf16, the CPU default, f16 and q8_0) every
// fixture's greedy tokens are the same over the whole fixture, with the
// largest logit difference recorded (RecordProperty) and bounded.
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
  explicit Runner(const ModelWeights& w, int64_t max_tokens = 64,
                  KvDType dtype = KvDType::kF32)
      : w_(w),
        kv_(w.config.num_layers, w.config.kv_dim(), 16, 16, dtype,
            w.config.head_dim),
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

// The fp32 fixtures with a 16- or 8-bit KV cache: the greedy token of every
// row (prefill rows and decode steps) equals the fixture's, and the largest
// logit difference is recorded and stays under `bound`.
float CheckGreedyWithKvDType(const std::string& model_path,
                             const std::string& fixture_dir, KvDType dtype,
                             float bound) {
  auto weights = LoadModel(model_path);
  EXPECT_TRUE(weights.ok()) << weights.status();
  if (!weights.ok()) return -1;
  const ModelConfig& c = (*weights)->config;
  if (!CheckKvDType(dtype, c.kv_dim(), c.head_dim).ok()) return -1;
  const nlohmann::json meta = ReadJson(fixture_dir + "/expected.json");
  const std::vector<float> expected =
      ReadF32(fixture_dir + "/" + meta["logits_file"].get<std::string>());
  const int64_t vocab = meta["vocab_size"];
  const auto prompt = meta["prompt_ids"].get<std::vector<int32_t>>();
  const auto decode = meta["decode_ids"].get<std::vector<int32_t>>();
  Runner run(**weights, 64, dtype);
  std::vector<float> got = run.Feed(prompt, /*all=*/true);
  float max_diff = 0;
  for (size_t r = 0; r < prompt.size(); ++r) {
    EXPECT_EQ(Argmax(got.data() + r * vocab, vocab),
              Argmax(expected.data() + r * vocab, vocab))
        << "prefill row " << r;
    for (int64_t i = 0; i < vocab; ++i) {
      max_diff = std::max(
          max_diff, std::fabs(got[r * vocab + i] - expected[r * vocab + i]));
    }
  }
  std::vector<float> last(got.end() - vocab, got.end());
  for (size_t k = 0; k < decode.size(); ++k) {
    EXPECT_EQ(Argmax(last.data(), vocab), decode[k]) << "decode step " << k;
    last = run.Feed({decode[k]}, false);
    const float* want = expected.data() + (prompt.size() + k) * vocab;
    EXPECT_EQ(Argmax(last.data(), vocab), Argmax(want, vocab))
        << "after decode step " << k;
    for (int64_t i = 0; i < vocab; ++i) {
      max_diff = std::max(max_diff, std::fabs(last[i] - want[i]));
    }
  }
  EXPECT_LT(max_diff, bound) << KvDTypeName(dtype);
  return max_diff;
}

class KvDTypeParityTest : public ::testing::TestWithParam<KvDType> {
 protected:
  // Checks one fixture and records its largest logit difference.
  void Check(const std::string& name, const std::string& model,
             const std::string& dir, float bound) {
    const float d = CheckGreedyWithKvDType(model, dir, GetParam(), bound);
    if (d < 0) {
      std::printf("%s: %s cannot store this model's heads, skipped\n",
                  name.c_str(), KvDTypeName(GetParam()));
      return;
    }
    std::printf("%s, --kv-dtype %s: greedy tokens equal; largest logit "
                "difference %.3g\n",
                name.c_str(), KvDTypeName(GetParam()), d);
    ::testing::Test::RecordProperty(name + "_max_logit_diff",
                                    std::to_string(d));
  }
};

// Bounds: about twice the largest logit differences measured (f32:
// < 1.3e-5; bf16 rounds q and the softmax weights to bf16 as well):
//   tiny_llama   bf16 0.0497  f16 0.00491
//   tiny_qwen3   bf16 0.098   f16 0.00668
//   stories260K  bf16 0.225   f16 0.0339
// (q8_0 needs head_dim % 32 == 0, which these heads of 16, 24 and 8 are
// not; SmolLM2 below runs it). A cache read wrongly changes the tokens.
float Bound(const std::string& fixture, KvDType d) {
  const bool bf = d == KvDType::kBF16;
  if (fixture == "tiny_llama") return bf ? 0.1f : 0.01f;
  if (fixture == "tiny_qwen3") return bf ? 0.2f : 0.014f;
  return bf ? 0.45f : 0.07f;
}

TEST_P(KvDTypeParityTest, TinyLlama) {
  Check("tiny_llama", kParityDir + "/tiny_llama", kParityDir + "/tiny_llama",
        Bound("tiny_llama", GetParam()));
}

TEST_P(KvDTypeParityTest, TinyQwen3) {
  Check("tiny_qwen3", kParityDir + "/tiny_qwen3", kParityDir + "/tiny_qwen3",
        Bound("tiny_qwen3", GetParam()));
}

TEST_P(KvDTypeParityTest, Stories260K) {
  const std::string bin =
      std::string(PDSERVE_SHARED_DIR) + "/models/stories260K/stories260K.bin";
  if (!std::filesystem::exists(bin)) GTEST_SKIP() << bin << " absent";
  Check("stories260K", bin, kParityDir + "/stories260K",
        Bound("stories260K", GetParam()));
}

TEST_P(KvDTypeParityTest, SmolLM2Q4_1GreedyTokens) {
  const nlohmann::json meta = ReadJson(kParityDir + "/smollm2_q4_1.json");
  const std::string path =
      CacheDir() + "/models/" + meta["model"].get<std::string>();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
  auto weights = LoadModel(path);
  ASSERT_TRUE(weights.ok()) << weights.status();
  const int64_t vocab = (*weights)->config.vocab_size;
  const auto prompt = meta["prompt_ids"].get<std::vector<int32_t>>();
  const auto greedy = meta["greedy_ids"].get<std::vector<int32_t>>();
  Runner run(**weights, 64, GetParam());
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
  std::printf("SmolLM2 Q4_1, --kv-dtype %s: top-1 equal at all %zu steps; "
              "largest logit difference (reference top-8) %.4f\n",
              KvDTypeName(GetParam()), greedy.size(), max_diff);
  ::testing::Test::RecordProperty("max_logit_diff", std::to_string(max_diff));
  EXPECT_LT(max_diff, 2.0f);  // as for f32: 8-bit activation rounding
}

INSTANTIATE_TEST_SUITE_P(
    KvDTypes, KvDTypeParityTest,
    ::testing::Values(KvDType::kBF16, KvDType::kF16, KvDType::kQ8_0),
    [](const ::testing::TestParamInfo<KvDType>& i) {
      return std::string(KvDTypeName(i.param));
    });

}  // namespace
}  // namespace pdserve
