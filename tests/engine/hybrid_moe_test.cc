// Qwen3 MoE on the CPU: golden logits against transformers (fixture made by
// tests/tools/make_hybrid_fixtures.py), chunked prefill == one-shot, batched
// greedy == alone, the same model through llama.cpp's GGUF names, and the
// expert-read accounting (each selected expert read once per step).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/formats/gguf_writer.h"
#include "engine/loader/model_config_io.h"
#include "engine/loader/model_loader.h"
#include "gtest/gtest.h"
#include "tests/engine/hybrid_test_util.h"

namespace pdserve {
namespace {

using hybrid_test::kHybridDir;

const std::string kMoeDir = kHybridDir + "/tiny_qwen3_moe";

std::unique_ptr<ModelWeights> LoadMoe() {
  auto w = LoadModel(kMoeDir);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? std::move(*w) : nullptr;
}

std::vector<int32_t> Prompt() {
  return hybrid_test::ReadJson(kMoeDir + "/expected.json")["prompt_ids"]
      .get<std::vector<int32_t>>();
}

TEST(HybridMoeTest, ConfigFromHfJson) {
  auto c = ReadModelConfig(kMoeDir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, Architecture::kQwen3Moe);
  EXPECT_EQ(c->num_experts, 6);
  EXPECT_EQ(c->num_experts_used, 3);
  EXPECT_EQ(c->moe_intermediate_size, 16);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_TRUE(c->IsMoeLayer(0));
  EXPECT_FALSE(c->IsMoeLayer(1));  // mlp_only_layers
  EXPECT_TRUE(c->IsMoeLayer(2));
}

// The Qwen3-235B-A22B config.json (values as published): 128 experts, top-8,
// expert width 1536, no shared expert, every layer sparse.
TEST(HybridMoeTest, Qwen3_235B_A22B_Config) {
  const nlohmann::json j = nlohmann::json::parse(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 151643,
    "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 12288, "max_position_embeddings": 40960,
    "max_window_layers": 94, "mlp_only_layers": [], "model_type": "qwen3_moe",
    "moe_intermediate_size": 1536, "norm_topk_prob": true,
    "num_attention_heads": 64, "num_experts": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 94, "num_key_value_heads": 4,
    "output_router_logits": false, "rms_norm_eps": 1e-06,
    "rope_scaling": null, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001, "sliding_window": null,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
  auto c = ConfigFromHfJson(j, "Qwen3-235B-A22B/config.json", "235B");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, Architecture::kQwen3Moe);
  EXPECT_EQ(c->num_experts, 128);
  EXPECT_EQ(c->num_experts_used, 8);
  EXPECT_EQ(c->moe_intermediate_size, 1536);
  EXPECT_EQ(c->shared_expert_intermediate_size, 0);
  EXPECT_EQ(c->q_dim(), 64 * 128);
  EXPECT_EQ(c->kv_dim(), 4 * 128);
  for (int64_t l = 0; l < c->num_layers; ++l) EXPECT_TRUE(c->IsMoeLayer(l));
  EXPECT_EQ(c->num_linear_layers(), 0);
  EXPECT_EQ(c->num_kv_layers(), 94);
}

TEST(HybridMoeTest, MatchesTransformers) {
  auto w = LoadMoe();
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->layers[0].experts.size(), 6u);
  EXPECT_TRUE(w->layers[1].experts.empty());
  EXPECT_FALSE(w->layers[1].w_gate.empty());
  hybrid_test::CheckGolden(*w, kMoeDir, 1e-4f);
}

// The golden's greedy tokens with the 16-bit KV caches (bf16 is the CPU
// default); bounds: about twice the differences measured
// (bf16 0.0242, f16 0.00508).
TEST(HybridMoeTest, GreedyTokensWith16BitKv) {
  auto w = LoadMoe();
  ASSERT_NE(w, nullptr);
  hybrid_test::CheckGoldenGreedy(*w, kMoeDir, KvDType::kBF16, 0.05f);
  hybrid_test::CheckGoldenGreedy(*w, kMoeDir, KvDType::kF16, 0.011f);
}

TEST(HybridMoeTest, ChunkedPrefillEqualsOneShot) {
  auto w = LoadMoe();
  ASSERT_NE(w, nullptr);
  for (int64_t chunk : {1, 3, 16}) {
    hybrid_test::CheckChunked(*w, Prompt(), chunk, 1e-5f);
  }
}

TEST(HybridMoeTest, BatchedGreedyEqualsAlone) {
  auto w = LoadMoe();
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

// Each step reads 3 matrices per DISTINCT selected expert, never more; with
// 8 decode rows at top-3 over 6 experts that is far below 8 * 3 per layer.
TEST(HybridMoeTest, ExpertsReadOncePerStep) {
  auto w = LoadMoe();
  ASSERT_NE(w, nullptr);
  hybrid_test::MultiRunner run(*w);
  const std::vector<int32_t> p = Prompt();
  std::vector<int> seqs;
  std::vector<std::vector<int32_t>> toks;
  for (int s = 0; s < 8; ++s) {
    seqs.push_back(s);
    toks.push_back({p.begin() + s, p.begin() + s + 4});
  }
  run.Step(seqs, toks, false);  // prefill 8 x 4 tokens
  for (auto& t : toks) t = {t.back()};
  ForwardStats stats;
  run.Step(seqs, toks, false, &stats);
  const int64_t moe_layers = 2;
  EXPECT_GT(stats.experts_selected, 0);
  EXPECT_LE(stats.experts_selected, moe_layers * 6);
  EXPECT_EQ(stats.expert_matrices_read, 3 * stats.experts_selected);
  EXPECT_LT(stats.expert_matrices_read, moe_layers * 8 * 3 * 3);
  // A single row selects exactly top-k experts per MoE layer.
  ForwardStats one;
  run.Step({0}, {{3}}, false, &one);
  EXPECT_EQ(one.experts_selected, moe_layers * 3);
  EXPECT_EQ(one.expert_matrices_read, moe_layers * 3 * 3);
}

// llama.cpp's qwen3moe makes every layer sparse, so the GGUF check uses the
// fixture's two sparse layers (0 and 2) as an in-memory 2-layer model; the
// same weights written with llama.cpp's names and 3-D expert tensors must
// load to bit-identical logits.
TEST(HybridMoeTest, GgufNamesLoadTheSameModel) {
  auto full = LoadMoe();
  ASSERT_NE(full, nullptr);
  ModelWeights w = *full;
  w.layers = {full->layers[0], full->layers[2]};
  w.config.num_layers = 2;
  w.config.mlp_only_layers.clear();
  const ModelConfig& c = w.config;
  GgufWriter g;
  g.SetString("general.architecture", "qwen3moe");
  g.SetString("general.name", "tiny_qwen3_moe");
  g.SetUint32("qwen3moe.block_count", c.num_layers);
  g.SetUint32("qwen3moe.embedding_length", c.hidden_size);
  g.SetUint32("qwen3moe.feed_forward_length", c.intermediate_size);
  g.SetUint32("qwen3moe.attention.head_count", c.num_heads);
  g.SetUint32("qwen3moe.attention.head_count_kv", c.num_kv_heads);
  g.SetUint32("qwen3moe.attention.key_length", c.head_dim);
  g.SetUint32("qwen3moe.context_length", c.max_context);
  g.SetFloat32("qwen3moe.rope.freq_base", c.rope_theta);
  g.SetFloat32("qwen3moe.attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  g.SetUint32("qwen3moe.expert_count", c.num_experts);
  g.SetUint32("qwen3moe.expert_used_count", c.num_experts_used);
  g.SetUint32("qwen3moe.expert_feed_forward_length", c.moe_intermediate_size);
  g.SetUint32("qwen3moe.vocab_size", c.vocab_size);
  auto matrix = [&](const std::string& name, const WeightView& v) {
    ASSERT_TRUE(g.AddTensor(name, DType::kF32, {v.cols, v.rows},
                            std::string(static_cast<const char*>(v.data),
                                        v.rows * v.row_bytes))
                    .ok());
  };
  auto vec = [&](const std::string& name, const float* p, int64_t n) {
    ASSERT_TRUE(g.AddF32Tensor(name, {n}, std::vector<float>(p, p + n)).ok());
  };
  matrix("token_embd.weight", w.token_embedding);
  matrix("output.weight", w.lm_head);
  vec("output_norm.weight", w.output_norm, c.hidden_size);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    const std::string b = "blk." + std::to_string(l) + ".";
    vec(b + "attn_norm.weight", lw.attn_norm, c.hidden_size);
    vec(b + "ffn_norm.weight", lw.ffn_norm, c.hidden_size);
    vec(b + "attn_q_norm.weight", lw.q_norm, c.head_dim);
    vec(b + "attn_k_norm.weight", lw.k_norm, c.head_dim);
    matrix(b + "attn_q.weight", lw.wq);
    matrix(b + "attn_k.weight", lw.wk);
    matrix(b + "attn_v.weight", lw.wv);
    matrix(b + "attn_output.weight", lw.wo);
    matrix(b + "ffn_gate_inp.weight", lw.router);
    for (int kind = 0; kind < 3; ++kind) {
      std::string bytes;
      int64_t rows = 0, cols = 0;
      for (const ExpertWeights& e : lw.experts) {
        const WeightView& v = kind == 0 ? e.gate : kind == 1 ? e.up : e.down;
        bytes.append(static_cast<const char*>(v.data), v.rows * v.row_bytes);
        rows = v.rows;
        cols = v.cols;
      }
      const char* names[] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
      ASSERT_TRUE(g.AddTensor(b + names[kind] + ".weight", DType::kF32,
                              {cols, rows, c.num_experts}, bytes)
                      .ok());
    }
  }
  const std::string path = ::testing::TempDir() + "/hybrid_moe_" +
                           std::to_string(::getpid()) + ".gguf";
  ASSERT_TRUE(g.WriteFile(path).ok());
  auto gguf = LoadModel(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  EXPECT_EQ((*gguf)->config.arch, Architecture::kQwen3Moe);
  EXPECT_EQ((*gguf)->config.num_experts, 6);
  EXPECT_EQ((*gguf)->config.num_experts_used, 3);
  EXPECT_EQ((*gguf)->config.moe_intermediate_size, 16);
  const std::vector<int32_t> p = Prompt();
  hybrid_test::MultiRunner a(w), b(**gguf);
  EXPECT_EQ(a.Feed(p, true), b.Feed(p, true));
}

}  // namespace
}  // namespace pdserve
