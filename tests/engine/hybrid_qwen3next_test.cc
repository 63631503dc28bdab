// Qwen3-Next on the CPU: the hybrid pattern with fused, per-key-head grouped
// in-projections and a sparse MoE with a sigmoid-gated shared expert. Golden
// logits against transformers' Qwen3NextForCausalLM (fixture made by
// tests/tools/make_hybrid_fixtures.py), chunked prefill == one-shot, batched
// greedy == alone.
#include <string>
#include <vector>

#include "engine/loader/model_loader.h"
#include "gtest/gtest.h"
#include "tests/engine/hybrid_test_util.h"

namespace pdserve {
namespace {

const std::string kDir = hybrid_test::kHybridDir + "/tiny_qwen3_next";

std::unique_ptr<ModelWeights> Load() {
  auto w = LoadModel(kDir);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? std::move(*w) : nullptr;
}

std::vector<int32_t> Prompt() {
  return hybrid_test::ReadJson(kDir + "/expected.json")["prompt_ids"]
      .get<std::vector<int32_t>>();
}

TEST(HybridQwen3NextTest, ConfigFromHfJson) {
  auto c = ReadModelConfig(kDir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, Architecture::kQwen3Next);
  EXPECT_EQ(c->linear_layers, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(c->num_experts, 4);
  EXPECT_EQ(c->num_experts_used, 2);
  EXPECT_EQ(c->shared_expert_intermediate_size, 24);
  EXPECT_EQ(c->rope_dims, 4);  // head_dim 16 * 0.25
  EXPECT_TRUE(c->mrope_sections.empty());
  EXPECT_TRUE(c->attn_output_gate);
}

TEST(HybridQwen3NextTest, MatchesTransformers) {
  auto w = Load();
  ASSERT_NE(w, nullptr);
  EXPECT_FALSE(w->layers[0].shared_gate.empty());
  hybrid_test::CheckGolden(*w, kDir, 1e-4f);
}

// The golden's greedy tokens with the 16-bit KV caches (bf16 is the CPU
// default); bounds: about twice the differences measured
// (bf16 0.018, f16 0.00286).
TEST(HybridQwen3NextTest, GreedyTokensWith16BitKv) {
  auto w = Load();
  ASSERT_NE(w, nullptr);
  hybrid_test::CheckGoldenGreedy(*w, kDir, KvDType::kBF16, 0.04f);
  hybrid_test::CheckGoldenGreedy(*w, kDir, KvDType::kF16, 0.006f);
}

TEST(HybridQwen3NextTest, ChunkedPrefillEqualsOneShot) {
  auto w = Load();
  ASSERT_NE(w, nullptr);
  for (int64_t chunk : {1, 3, 16}) {
    hybrid_test::CheckChunked(*w, Prompt(), chunk, 1e-5f);
  }
}

TEST(HybridQwen3NextTest, BatchedGreedyEqualsAlone) {
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

}  // namespace
}  // namespace pdserve
