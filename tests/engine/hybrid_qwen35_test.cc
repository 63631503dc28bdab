// Qwen3.5 hybrid (Gated DeltaNet + output-gated full attention) on the CPU:
// golden logits against transformers' Qwen3_5ForCausalLM (fixture made by
// tests/tools/make_hybrid_fixtures.py), chunked prefill == one-shot (the
// conv and recurrent states carried across chunks), batched greedy == alone,
// and the text-only mRoPE reducing to plain RoPE.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/loader/model_loader.h"
#include "engine/model/mrope.h"
#include "engine/model/sequence_runner.h"
#include "gtest/gtest.h"
#include "tests/engine/hybrid_test_util.h"

namespace pdserve {
namespace {

using hybrid_test::kHybridDir;

const std::string kDir = kHybridDir + "/tiny_qwen35";

std::unique_ptr<ModelWeights> Load() {
  auto w = LoadModel(kDir);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? std::move(*w) : nullptr;
}

std::vector<int32_t> Prompt() {
  return hybrid_test::ReadJson(kDir + "/expected.json")["prompt_ids"]
      .get<std::vector<int32_t>>();
}

TEST(HybridQwen35Test, ConfigFromHfJson) {
  auto c = ReadModelConfig(kDir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, Architecture::kQwen35);
  EXPECT_EQ(c->linear_layers, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(c->num_linear_layers(), 2);
  EXPECT_EQ(c->linear_conv_dim(), 2 * 2 * 8 + 4 * 8);
  EXPECT_EQ(c->rope_dims, 8);  // head_dim 16 * partial_rotary_factor 0.5
  EXPECT_EQ(c->mrope_sections, (std::vector<int64_t>{2, 1, 1}));
  EXPECT_TRUE(c->attn_output_gate);
  EXPECT_EQ(c->conv_state_floats(), 64 * 3);
  EXPECT_EQ(c->recurrent_state_floats(), 4 * 8 * 8);
}

TEST(HybridQwen35Test, MatchesTransformers) {
  auto w = Load();
  ASSERT_NE(w, nullptr);
  hybrid_test::CheckGolden(*w, kDir, 1e-4f);
}

// The golden's greedy tokens with the 16-bit KV caches (bf16 is the CPU
// default); bounds: about twice the differences measured
// (bf16 0.0409, f16 0.00483).
TEST(HybridQwen35Test, GreedyTokensWith16BitKv) {
  auto w = Load();
  ASSERT_NE(w, nullptr);
  hybrid_test::CheckGoldenGreedy(*w, kDir, KvDType::kBF16, 0.08f);
  hybrid_test::CheckGoldenGreedy(*w, kDir, KvDType::kF16, 0.01f);
}

TEST(HybridQwen35Test, ChunkedPrefillEqualsOneShot) {
  auto w = Load();
  ASSERT_NE(w, nullptr);
  // Chunk boundaries change the chunked delta rule's summation order; with
  // AVX2's 8-lane Dot/Axpy the difference measured 1.001e-5 (AVX-512 and
  // scalar below 1e-5), hence 3e-5.
  for (int64_t chunk : {1, 3, 16}) {
    hybrid_test::CheckChunked(*w, Prompt(), chunk, 3e-5f);
  }
}

TEST(HybridQwen35Test, BatchedGreedyEqualsAlone) {
  auto w = Load();
  ASSERT_NE(w, nullptr);
  const std::vector<int32_t> p = Prompt();
  hybrid_test::CheckBatchedGreedy(
      *w,
      {std::vector<int32_t>(p.begin(), p.begin() + 20),
       std::vector<int32_t>(p.begin() + 5, p.begin() + 12),
       std::vector<int32_t>(p.begin() + 10, p.end()),
       {1, 7}},
      12);
}

TEST(HybridQwen35Test, SpanWithoutLinearStateIsRejected) {
  auto w = Load();
  ASSERT_NE(w, nullptr);
  KvStorage kv(w->config.num_kv_layers(), w->config.kv_dim(), 16, 4);
  ThreadPool pool(1);
  auto fp = ForwardPass::Create(*w, kv, pool, 16);
  ASSERT_TRUE(fp.ok()) << fp.status();
  const std::vector<int32_t> tokens = {1, 2, 3};
  const std::vector<int32_t> pages = {0};
  SequenceSpan span{tokens, 0, pages, 0, false};
  std::vector<float> logits(w->config.vocab_size);
  absl::Status s = (*fp)->Run({&span, 1}, absl::MakeSpan(logits));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("linear_state"), std::string::npos) << s;
}

// SequenceRunner (pdserve generate) carries the linear state across its
// chunks and Reset; the KV storage holds only the 2 full-attention layers.
TEST(HybridQwen35Test, SequenceRunnerMatchesGolden) {
  auto w = Load();
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->config.num_kv_layers(), 2);
  const nlohmann::json meta = hybrid_test::ReadJson(kDir + "/expected.json");
  const std::vector<float> expected =
      hybrid_test::ReadF32(kDir + "/expected_logits.f32");
  const int64_t vocab = w->config.vocab_size;
  const std::vector<int32_t> prompt = Prompt();
  const auto decode = meta["decode_ids"].get<std::vector<int32_t>>();
  ThreadPool pool(2);
  auto runner = SequenceRunner::Create(*w, pool, 64, 5);
  ASSERT_TRUE(runner.ok()) << runner.status();
  for (int pass = 0; pass < 2; ++pass) {  // the second after Reset
    (*runner)->Reset();
    auto logits = (*runner)->Feed(prompt);
    ASSERT_TRUE(logits.ok()) << logits.status();
    for (size_t k = 0; k < 4; ++k) {
      const float* want = expected.data() + (prompt.size() - 1 + k) * vocab;
      for (int64_t i = 0; i < vocab; ++i) {
        ASSERT_NEAR((*logits)[i], want[i], 1e-4)
            << "pass " << pass << " step " << k;
      }
      logits = (*runner)->Feed({&decode[k], 1});
      ASSERT_TRUE(logits.ok()) << logits.status();
    }
  }
}

// The layout published Qwen3.5 checkpoints use: Qwen3_5ForConditionalGeneration
// with the language model's config in text_config and its weights under
// model.language_model.*. The fixture rewritten that way gives the same
// golden logits.
TEST(HybridQwen35Test, MultimodalCheckpointLayoutLoads) {
  const std::string dir =
      ::testing::TempDir() + "/hybrid_qwen35_mm_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  nlohmann::json text = hybrid_test::ReadJson(kDir + "/config.json");
  text.erase("architectures");
  nlohmann::json top = {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
                        {"model_type", "qwen3_5"},
                        {"tie_word_embeddings", false},
                        {"text_config", text},
                        {"vision_config", {{"depth", 2}}}};
  std::ofstream(dir + "/config.json") << top.dump(1);
  // safetensors: u64 header length, JSON header, data (offsets relative to
  // the data, so renaming keys keeps them valid).
  std::ifstream in(kDir + "/model.safetensors", std::ios::binary);
  std::stringstream all;
  all << in.rdbuf();
  const std::string bytes = all.str();
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  nlohmann::json renamed;
  for (const auto& [key, value] : header.items()) {
    const bool lm = key.rfind("model.", 0) == 0;
    renamed[lm ? "model.language_model." + key.substr(6) : key] = value;
  }
  std::string h = renamed.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  const uint64_t hn = h.size();
  std::ofstream out(dir + "/model.safetensors", std::ios::binary);
  out.write(reinterpret_cast<const char*>(&hn), 8);
  out << h << bytes.substr(8 + n);
  out.close();
  auto w = LoadModel(dir);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->config.arch, Architecture::kQwen35);
  hybrid_test::CheckGolden(**w, kDir, 1e-4f);
}

// Text tokens have t == h == w: the interleaved mRoPE is plain RoPE, bit for
// bit; distinct positions pick h / w for the interleaved frequencies.
TEST(HybridQwen35Test, TextMropeIsPlainRope) {
  const int64_t half = 8;
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    inv[i] = 1.0f / std::pow(10000.0f, 2.0f * i / (2.0f * half));
  }
  const std::vector<int64_t> sections = {4, 2, 2};
  for (int64_t p : {0, 1, 17, 1000}) {
    const int64_t thw[3] = {p, p, p};
    std::vector<float> c(half), s(half);
    MropeCosSin(thw, sections, inv.data(), half, c.data(), s.data());
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv[i];
      EXPECT_EQ(c[i], std::cos(angle)) << p << " " << i;
      EXPECT_EQ(s[i], std::sin(angle)) << p << " " << i;
    }
  }
  // transformers' recomposition: h at 1, 4 (< 3 * 2), w at 2, 5; t else.
  const std::vector<int> want = {0, 1, 2, 0, 1, 2, 0, 0};
  for (int64_t i = 0; i < half; ++i) {
    EXPECT_EQ(MropeAxis(i, sections), want[i]) << i;
  }
  const int64_t thw[3] = {3, 50, 700};
  std::vector<float> c(half), s(half);
  MropeCosSin(thw, sections, inv.data(), half, c.data(), s.data());
  EXPECT_EQ(c[1], std::cos(50.0f * inv[1]));
  EXPECT_EQ(c[5], std::cos(700.0f * inv[5]));
  EXPECT_EQ(c[6], std::cos(3.0f * inv[6]));
}

}  // namespace
}  // namespace pdserve
