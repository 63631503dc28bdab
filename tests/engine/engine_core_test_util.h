// Test helpers for EngineCore: a tiny random Llama-shaped model held in
// memory (F32 weights), and loaders for the shared test models.
#ifndef PDSERVE_TESTS_ENGINE_ENGINE_CORE_TEST_UTIL_H_
#define PDSERVE_TESTS_ENGINE_ENGINE_CORE_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <unistd.h>
#include <random>
#include <vector>

#include "engine/loader/model_loader.h"
#include "engine/model_weights.h"
#include "gtest/gtest.h"

namespace pdserve::testing_util {

// A random tiny model (vocab 97, width 32, 2 layers, GQA 4:2 heads of 8,
// MLP 48, context 1024). Weights are N(0, 0.2) so logits are not flat;
// norms are 1 +- 0.1. Deterministic for a seed.
inline std::shared_ptr<ModelWeights> TinyRandomModel(uint32_t seed,
                                                     int64_t num_layers = 2) {
  auto w = std::make_shared<ModelWeights>();
  ModelConfig& c = w->config;
  c.arch = Architecture::kLlama;
  c.name = "tiny-random";
  c.vocab_size = 97;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_layers = num_layers;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.rope_dims = 8;
  c.rope_theta = 10000.0f;
  c.rope_style = RopeStyle::kNeox;
  c.rms_norm_eps = 1e-5f;
  c.max_context = 1024;
  c.tied_embeddings = false;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  w->source_format = "memory";

  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.2f);
  std::uniform_real_distribution<float> norm_w(0.9f, 1.1f);
  auto matrix = [&](int64_t rows, int64_t cols) {
    auto data = std::make_shared<std::vector<float>>(rows * cols);
    for (float& v : *data) v = normal(rng);
    w->storage.push_back(data);
    w->weight_bytes += rows * cols * 4;
    WeightView v;
    v.type = DType::kF32;
    v.rows = rows;
    v.cols = cols;
    v.row_bytes = cols * 4;
    v.data = data->data();
    return v;
  };
  auto vec = [&](int64_t n) {
    auto data = std::make_shared<std::vector<float>>(n);
    for (float& v : *data) v = norm_w(rng);
    w->storage.push_back(data);
    w->weight_bytes += n * 4;
    return static_cast<const float*>(data->data());
  };
  w->token_embedding = matrix(c.vocab_size, c.hidden_size);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    LayerWeights lw;
    lw.attn_norm = vec(c.hidden_size);
    lw.wq = matrix(c.q_dim(), c.hidden_size);
    lw.wk = matrix(c.kv_dim(), c.hidden_size);
    lw.wv = matrix(c.kv_dim(), c.hidden_size);
    lw.wo = matrix(c.hidden_size, c.q_dim());
    lw.ffn_norm = vec(c.hidden_size);
    lw.w_gate = matrix(c.intermediate_size, c.hidden_size);
    lw.w_up = matrix(c.intermediate_size, c.hidden_size);
    lw.w_down = matrix(c.hidden_size, c.intermediate_size);
    w->layers.push_back(lw);
  }
  w->output_norm = vec(c.hidden_size);
  w->lm_head = matrix(c.vocab_size, c.hidden_size);
  return w;
}

// Random token ids in [3, vocab) (no BOS/EOS), deterministic for a seed.
inline std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab,
                                         uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(3, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> t(n);
  for (int32_t& v : t) v = d(rng);
  return t;
}

// The model at `path` (any format LoadModel reads), or null when the file
// is absent (a test then skips); a file that fails to load fails the test.
inline std::shared_ptr<const ModelWeights> LoadModelFile(
    const std::string& path) {
  if (access(path.c_str(), R_OK) != 0) return nullptr;
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(path);
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return nullptr;
  return std::shared_ptr<const ModelWeights>(std::move(*w));
}

}  // namespace pdserve::testing_util

#endif  // PDSERVE_TESTS_ENGINE_ENGINE_CORE_TEST_UTIL_H_
