#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/loader/model_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/formats_test_util.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;
using testing_util::TempDir;
using testing_util::TinySpec;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// First value of row r of a view, dequantized.
float At(const WeightView& v, int64_t r, int64_t c) {
  std::vector<float> row(v.cols);
  DequantizeRow(v.type, v.row(r), row.data(), v.cols);
  return row[c];
}

TEST(LoaderTest, Stories260kLlama2c) {
  const std::string path = testing_util::Stories260kPath();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
  ASSERT_EQ(*DetectModelFormat(path), ModelFormat::kLlama2c);
  auto w = LoadModel(path);
  ASSERT_TRUE(w.ok()) << w.status();
  const ModelConfig& c = (*w)->config;
  EXPECT_EQ(c.arch, Architecture::kLlama);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.rope_dims, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_context, 512);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.rope_style, RopeStyle::kInterleaved);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ((*w)->source_format, "llama2c");
  EXPECT_EQ((*w)->layers.size(), 5u);
  EXPECT_EQ((*w)->lm_head.data, (*w)->token_embedding.data);
  // Spot-check values against the raw file: wk of layer 2, row 3, col 5.
  const std::string raw = testing_util::ReadBytes(path);
  const int64_t dim = 64, kv = 32, L = 5, vocab = 512;
  const int64_t wk_start = 28 + 4 * (vocab * dim + L * dim + L * dim * dim);
  float expected;
  std::memcpy(&expected,
              raw.data() + wk_start + 4 * (2 * kv * dim + 3 * dim + 5), 4);
  EXPECT_EQ(At((*w)->layers[2].wk, 3, 5), expected);
  EXPECT_EQ((*w)->layers[4].w_down.rows, 64);
  EXPECT_EQ((*w)->layers[4].w_down.cols, 172);
  // All f32 weights once (freq_cis excluded) = file size - header - freqs.
  EXPECT_EQ((*w)->weight_bytes, 1056540 - 28 - 512 * 8 * 4);

  auto cfg = ReadModelConfig(path);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->intermediate_size, 172);
}

TEST(LoaderTest, SmolLm2Gguf) {
  const std::string path = testing_util::SmolLm2Path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
  auto w = LoadModel(path);
  ASSERT_TRUE(w.ok()) << w.status();
  const ModelConfig& c = (*w)->config;
  EXPECT_EQ(c.arch, Architecture::kLlama);
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope_dims, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.max_context, 8192);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.rope_style, RopeStyle::kInterleaved);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_EQ((*w)->token_embedding.type, DType::kQ8_0);
  EXPECT_EQ((*w)->layers[0].wq.type, DType::kQ4_1);
  EXPECT_EQ((*w)->layers[29].w_down.cols, 1536);
  EXPECT_EQ((*w)->lm_head.data, (*w)->token_embedding.data);
  // ~98 MB file: weights are nearly all of it.
  EXPECT_GT((*w)->weight_bytes, 90'000'000);
  EXPECT_LT((*w)->weight_bytes, 110'000'000);
}

TEST(LoaderTest, SyntheticLlamaGgufAllTypes) {
  TempDir dir("loader");
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                     DType::kQ4_0, DType::kQ4_1}) {
    TinySpec s;
    const std::string path = dir.Path(absl::StrCat(DTypeName(type), ".gguf"));
    ASSERT_TRUE(
        testing_util::TinyGguf(s, type, DType::kF16).WriteFile(path).ok());
    auto w = LoadModel(path);
    ASSERT_TRUE(w.ok()) << w.status();
    const ModelConfig& c = (*w)->config;
    EXPECT_EQ(c.name, "tiny-llama");
    EXPECT_EQ(c.vocab_size, 64);
    EXPECT_EQ(c.head_dim, 8);
    EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
    EXPECT_FALSE(c.tied_embeddings);
    EXPECT_EQ(c.rope_style, RopeStyle::kInterleaved);
    EXPECT_EQ((*w)->layers[1].wq.type, type);
    EXPECT_EQ((*w)->lm_head.rows, 64);
    EXPECT_NE((*w)->lm_head.data, (*w)->token_embedding.data);
    // F16 norms were converted to f32.
    const auto tensors = testing_util::TinyTensors(s);
    const float norm0 = tensors[1].values[3];  // blk.0.attn_norm
    EXPECT_NEAR((*w)->layers[0].attn_norm[3], norm0, 1e-3);
    const float q = tensors[2].values[1 * 32 + 7];  // attn_q row 1 col 7
    EXPECT_NEAR(At((*w)->layers[0].wq, 1, 7), q, 0.15) << DTypeName(type);
  }
}

TEST(LoaderTest, SyntheticQwen3Gguf) {
  TempDir dir("loader");
  TinySpec s;
  s.qwen3 = true;
  s.head_dim = 16;  // != hidden / heads = 8
  s.tied = true;
  const std::string path = dir.Path("qwen3.gguf");
  ASSERT_TRUE(testing_util::TinyGguf(s, DType::kQ8_0, DType::kF32)
                  .WriteFile(path)
                  .ok());
  auto w = LoadModel(path);
  ASSERT_TRUE(w.ok()) << w.status();
  const ModelConfig& c = (*w)->config;
  EXPECT_EQ(c.arch, Architecture::kQwen3);
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.q_dim(), 64);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_NE((*w)->layers[1].q_norm, nullptr);
  EXPECT_NE((*w)->layers[1].k_norm, nullptr);
  EXPECT_EQ((*w)->layers[0].wo.cols, 64);
  EXPECT_EQ((*w)->lm_head.data, (*w)->token_embedding.data);
}

TEST(LoaderTest, MissingTensor) {
  TempDir dir("loader");
  const std::string path = dir.Path("missing.gguf");
  ASSERT_TRUE(testing_util::TinyGguf(TinySpec(), DType::kF32, DType::kF32,
                                     "blk.1.ffn_up.weight")
                  .WriteFile(path)
                  .ok());
  auto w = LoadModel(path);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(w.status()), HasSubstr("'blk.1.ffn_up.weight' not found"));
  EXPECT_THAT(Msg(w.status()), HasSubstr(path));
}

TEST(LoaderTest, ShapeMismatch) {
  TempDir dir("loader");
  const std::string path = dir.Path("shape.gguf");
  auto mutate = [](testing_util::TinyTensor& t) {
    if (t.gguf_name == "blk.0.attn_k.weight") {
      t.shape = {24, 32};
      t.values.resize(24 * 32);
    }
  };
  ASSERT_TRUE(
      testing_util::TinyGguf(TinySpec(), DType::kF32, DType::kF32, "", mutate)
          .WriteFile(path)
          .ok());
  auto w = LoadModel(path);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(Msg(w.status()),
              HasSubstr("tensor 'blk.0.attn_k.weight' has shape [24, 32], "
                        "expected [16, 32]"));
}

TEST(LoaderTest, UnsupportedArchitecture) {
  TempDir dir("loader");
  GgufWriter w = testing_util::TinyGguf(TinySpec(), DType::kF32, DType::kF32);
  w.SetString("general.architecture", "gpt2");
  const std::string path = dir.Path("gpt2.gguf");
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto m = LoadModel(path);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Msg(m.status()), HasSubstr("architecture 'gpt2'"));
}

TEST(LoaderTest, RopeScalingRefused) {
  TempDir dir("loader");
  GgufWriter w = testing_util::TinyGguf(TinySpec(), DType::kF32, DType::kF32);
  w.SetString("llama.rope.scaling.type", "yarn");
  ASSERT_TRUE(w.WriteFile(dir.Path("yarn.gguf")).ok());
  auto m = LoadModel(dir.Path("yarn.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Msg(m.status()), HasSubstr("rope.scaling.type = 'yarn'"));
  w.SetString("llama.rope.scaling.type", "none");
  ASSERT_TRUE(w.AddF32Tensor("rope_freqs.weight", {4}, {1, 1, 1, 1}).ok());
  ASSERT_TRUE(w.WriteFile(dir.Path("freqs.gguf")).ok());
  m = LoadModel(dir.Path("freqs.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Msg(m.status()), HasSubstr("'rope_freqs.weight'"));
}

TEST(LoaderTest, UnknownFormat) {
  TempDir dir("loader");
  testing_util::WriteBytes(dir.Path("model.xyz"), "hello world");
  auto w = LoadModel(dir.Path("model.xyz"));
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(Msg(w.status()), HasSubstr("unrecognized model format"));
  EXPECT_EQ(LoadModel(dir.Path("nope.gguf")).status().code(),
            absl::StatusCode::kNotFound);
}

// A llama2.c checkpoint written from the header fields with zero weights.
std::string Llama2cBytes(int32_t dim, int32_t hidden, int32_t layers,
                         int32_t heads, int32_t kv_heads, int32_t vocab,
                         int32_t seq_len) {
  const int32_t header[7] = {dim,      hidden, layers, heads,
                             kv_heads, vocab,  seq_len};
  const int64_t v = vocab < 0 ? -vocab : vocab;
  const int64_t kv = kv_heads * (dim / heads);
  int64_t floats = v * dim + layers * dim * 2 + layers * dim * dim * 2 +
                   layers * kv * dim * 2 + layers * hidden * dim * 3 + dim +
                   seq_len * (dim / heads);
  if (vocab < 0) floats += v * dim;
  std::string out(reinterpret_cast<const char*>(header), sizeof(header));
  std::string body(floats * 4, '\0');
  for (int64_t i = 0; i < floats; ++i) {
    const float x = static_cast<float>(i % 1000) * 0.001f;
    std::memcpy(body.data() + 4 * i, &x, 4);
  }
  return out + body;
}

TEST(LoaderTest, Llama2cSeparateClassifier) {
  TempDir dir("loader");
  const std::string path = dir.Path("sep.bin");
  testing_util::WriteBytes(path, Llama2cBytes(32, 48, 2, 4, 2, -40, 16));
  auto w = LoadModel(path);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE((*w)->config.tied_embeddings);
  EXPECT_EQ((*w)->config.vocab_size, 40);
  EXPECT_EQ((*w)->config.name, "sep");
  EXPECT_NE((*w)->lm_head.data, (*w)->token_embedding.data);
  EXPECT_EQ((*w)->lm_head.rows, 40);
}

TEST(LoaderTest, Llama2cWrongSize) {
  TempDir dir("loader");
  const std::string path = dir.Path("short.bin");
  std::string bytes = Llama2cBytes(32, 48, 2, 4, 2, 40, 16);
  const size_t full = bytes.size();
  bytes.resize(full - 4);
  testing_util::WriteBytes(path, bytes);
  auto w = LoadModel(path);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(Msg(w.status()),
              HasSubstr(absl::StrCat("file size is ", full - 4)));
  EXPECT_THAT(Msg(w.status()), HasSubstr(absl::StrCat("implies ", full)));
  // A nonsense header is rejected before any size arithmetic.
  testing_util::WriteBytes(
      path, Llama2cBytes(32, 48, 2, 4, 2, 40, 16)
                .replace(8, 4, std::string("\xff\xff\xff\x7f", 4)));
  w = LoadModel(path);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(Msg(w.status()), HasSubstr("n_layers = 2147483647"));
}

}  // namespace
}  // namespace pdserve
