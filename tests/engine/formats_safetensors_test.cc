#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/formats/safetensors.h"
#include "engine/loader/model_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/formats_test_util.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;
using testing_util::StEntry;
using testing_util::TempDir;
using testing_util::TinySpec;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

void WriteFolder(const TempDir& dir, const TinySpec& s, DType type,
                 int pad = 8) {
  testing_util::WriteBytes(dir.Path("config.json"),
                           testing_util::TinyHfConfig(s).dump());
  testing_util::WriteBytes(dir.Path("model.safetensors"),
                           testing_util::SafetensorsBytes(
                               testing_util::TinyStEntries(s, type), pad));
}

float At(const WeightView& v, int64_t r, int64_t c) {
  std::vector<float> row(v.cols);
  DequantizeRow(v.type, v.row(r), row.data(), v.cols);
  return row[c];
}

TEST(SafetensorsTest, LlamaFolderAllDTypes) {
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    TempDir dir("st");
    TinySpec s;
    WriteFolder(dir, s, type);
    testing_util::WriteBytes(dir.Path("tokenizer.json"), "{}");
    auto w = LoadModel(dir.path());
    ASSERT_TRUE(w.ok()) << w.status();
    const ModelConfig& c = (*w)->config;
    EXPECT_EQ((*w)->source_format, "safetensors");
    EXPECT_EQ(c.arch, Architecture::kLlama);
    EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
    EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
    EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
    EXPECT_EQ(c.max_context, 128);
    EXPECT_EQ(c.eos_token_id, 2);
    EXPECT_EQ(c.bos_token_id, 1);
    EXPECT_FALSE(c.tied_embeddings);
    EXPECT_EQ((*w)->tokenizer_path, dir.Path("tokenizer.json"));
    EXPECT_EQ((*w)->layers[1].w_up.type, type);
    const auto tensors = testing_util::TinyTensors(s);
    const double tol = type == DType::kF32   ? 0
                       : type == DType::kF16 ? 1e-3
                                             : 1e-2;
    EXPECT_NEAR((*w)->layers[0].attn_norm[5], tensors[1].values[5], tol);
    EXPECT_NEAR(At((*w)->layers[0].wq, 2, 3), tensors[2].values[2 * 32 + 3],
                tol);
  }
}

TEST(SafetensorsTest, Qwen3TiedMisalignedViaConfigPath) {
  TempDir dir("st");
  TinySpec s;
  s.qwen3 = true;
  s.head_dim = 16;
  s.tied = true;
  WriteFolder(dir, s, DType::kBF16, /*pad=*/1);
  auto w = LoadModel(dir.Path("config.json"));
  ASSERT_TRUE(w.ok()) << w.status();
  const ModelConfig& c = (*w)->config;
  EXPECT_EQ(c.arch, Architecture::kQwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ((*w)->lm_head.data, (*w)->token_embedding.data);
  const auto tensors = testing_util::TinyTensors(s);
  // blk.0: attn_norm, q, k, v, o, q_norm.
  EXPECT_NEAR((*w)->layers[0].q_norm[7], tensors[6].values[7], 1e-2);
  for (const WeightView* v : {&(*w)->layers[0].wq, &(*w)->layers[1].w_down}) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v->data) % 2, 0u);
  }
  EXPECT_NEAR(At((*w)->layers[0].wk, 1, 1), tensors[3].values[32 + 1], 1e-2);
  auto cfg = ReadModelConfig(dir.path());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->head_dim, 16);
}

TEST(SafetensorsTest, TransformersV5RopeParameters) {
  TempDir dir("st");
  TinySpec s;
  WriteFolder(dir, s, DType::kF32);
  nlohmann::json cfg = testing_util::TinyHfConfig(s);
  cfg.erase("rope_theta");
  cfg.erase("rope_scaling");
  cfg["rope_parameters"] = {{"rope_theta", 1234.0}, {"rope_type", "default"}};
  cfg["layer_types"] = {"full_attention", "full_attention"};
  testing_util::WriteBytes(dir.Path("config.json"), cfg.dump());
  auto c = ReadModelConfig(dir.path());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FLOAT_EQ(c->rope_theta, 1234.0f);
  cfg["rope_parameters"]["rope_type"] = "yarn";
  testing_util::WriteBytes(dir.Path("config.json"), cfg.dump());
  EXPECT_THAT(Msg(ReadModelConfig(dir.path()).status()),
              HasSubstr("rope_parameters {"));
  cfg["rope_parameters"]["rope_type"] = "default";
  cfg["layer_types"] = {"full_attention", "sliding_attention"};
  testing_util::WriteBytes(dir.Path("config.json"), cfg.dump());
  EXPECT_THAT(Msg(ReadModelConfig(dir.path()).status()),
              HasSubstr("layer type \"sliding_attention\""));
}

// The parity fixtures committed by the model tests load with the values
// their config.json states.
TEST(SafetensorsTest, ParityFixturesLoad) {
  const std::string base = std::string(PDSERVE_TESTDATA_DIR) + "/parity/";
  for (const char* name : {"tiny_llama", "tiny_qwen3"}) {
    const std::string dir = base + name;
    if (!std::ifstream(dir + "/config.json").good()) {
      GTEST_SKIP() << dir << " absent";
    }
    auto w = LoadModel(dir);
    ASSERT_TRUE(w.ok()) << w.status();
    std::ifstream in(dir + "/config.json");
    const nlohmann::json cfg = nlohmann::json::parse(in);
    const ModelConfig& c = (*w)->config;
    EXPECT_EQ(c.head_dim, cfg["head_dim"].get<int64_t>()) << name;
    EXPECT_EQ(c.vocab_size, cfg["vocab_size"].get<int64_t>()) << name;
    EXPECT_EQ(c.tied_embeddings, cfg["tie_word_embeddings"].get<bool>());
    EXPECT_FLOAT_EQ(c.rope_theta,
                    cfg["rope_parameters"]["rope_theta"].get<float>());
    EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  }
}

TEST(SafetensorsTest, Sharded) {
  TempDir dir("st");
  TinySpec s;
  testing_util::WriteBytes(dir.Path("config.json"),
                           testing_util::TinyHfConfig(s).dump());
  std::vector<StEntry> all = testing_util::TinyStEntries(s, DType::kF32);
  std::vector<StEntry> a(all.begin(), all.begin() + all.size() / 2);
  std::vector<StEntry> b(all.begin() + all.size() / 2, all.end());
  nlohmann::json index;
  for (const StEntry& e : a) index["weight_map"][e.name] = "part-1.safetensors";
  for (const StEntry& e : b) index["weight_map"][e.name] = "part-2.safetensors";
  testing_util::WriteBytes(dir.Path("part-1.safetensors"),
                           testing_util::SafetensorsBytes(a));
  testing_util::WriteBytes(dir.Path("part-2.safetensors"),
                           testing_util::SafetensorsBytes(b));
  testing_util::WriteBytes(dir.Path("model.safetensors.index.json"),
                           index.dump());
  auto w = LoadModel(dir.path());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->storage.size(), 2u);

  // The index names a tensor its shard does not hold.
  index["weight_map"]["model.extra.weight"] = "part-1.safetensors";
  testing_util::WriteBytes(dir.Path("model.safetensors.index.json"),
                           index.dump());
  auto bad = LoadModel(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(Msg(bad.status()), HasSubstr("'model.extra.weight' is listed"));
  // A shard outside the folder is refused.
  index["weight_map"]["model.extra.weight"] = "../x.safetensors";
  testing_util::WriteBytes(dir.Path("model.safetensors.index.json"),
                           index.dump());
  bad = LoadModel(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(Msg(bad.status()), HasSubstr("invalid shard name"));
}

TEST(SafetensorsTest, UntiedWithoutLmHead) {
  TempDir dir("st");
  TinySpec s;
  s.tied = true;
  WriteFolder(dir, s, DType::kF32);
  nlohmann::json cfg = testing_util::TinyHfConfig(s);
  cfg["tie_word_embeddings"] = false;
  testing_util::WriteBytes(dir.Path("config.json"), cfg.dump());
  auto w = LoadModel(dir.path());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(w.status()), HasSubstr("'lm_head.weight' not found"));
}

TEST(SafetensorsCorruptTest, HeaderLengthPastEof) {
  TempDir dir("st");
  std::string bytes =
      testing_util::SafetensorsBytes({{"x", "F32", {2}, std::string(8, '\0')}});
  const uint64_t len = 1 << 20;
  std::memcpy(bytes.data(), &len, 8);
  testing_util::WriteBytes(dir.Path("a.safetensors"), bytes);
  auto m = SafetensorsModel::Open(dir.Path("a.safetensors"));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Msg(m.status()), HasSubstr("a.safetensors: header length "
                                         "1048576 runs past the end"));
  testing_util::WriteBytes(dir.Path("b.safetensors"), "abc");
  m = SafetensorsModel::Open(dir.Path("b.safetensors"));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Msg(m.status()), HasSubstr("file size is 3"));
}

TEST(SafetensorsCorruptTest, BadJson) {
  TempDir dir("st");
  std::string bytes =
      testing_util::SafetensorsBytes({{"x", "F32", {2}, std::string(8, '\0')}});
  bytes[8 + 1] = '!';
  testing_util::WriteBytes(dir.Path("a.safetensors"), bytes);
  auto m = SafetensorsModel::Open(dir.Path("a.safetensors"));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Msg(m.status()), HasSubstr("bad header JSON"));
  // Bad config.json.
  TinySpec s;
  WriteFolder(dir, s, DType::kF32);
  testing_util::WriteBytes(dir.Path("config.json"), "{\"vocab_size\": ");
  auto w = LoadModel(dir.path());
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(Msg(w.status()), HasSubstr("config.json: bad JSON"));
}

TEST(SafetensorsCorruptTest, BadEntries) {
  TempDir dir("st");
  auto open = [&](const std::vector<StEntry>& e) {
    std::string bytes = testing_util::SafetensorsBytes(e);
    testing_util::WriteBytes(dir.Path("a.safetensors"), bytes);
    return SafetensorsModel::Open(dir.Path("a.safetensors")).status();
  };
  absl::Status s = open({{"x", "F32", {3}, std::string(8, '\0')}});
  EXPECT_THAT(Msg(s), HasSubstr("tensor 'x': data_offsets [0,8] hold 8 bytes "
                                "but dtype F32 shape [3] needs 12"));
  s = open({{"x", "F32", {1 << 30, 1 << 30}, std::string(8, '\0')}});
  EXPECT_THAT(Msg(s), HasSubstr("tensor 'x': absurd shape"));
  // Offsets past the data section.
  std::string bytes =
      testing_util::SafetensorsBytes({{"x", "F32", {2}, std::string(8, '\0')}});
  bytes.resize(bytes.size() - 4);
  testing_util::WriteBytes(dir.Path("c.safetensors"), bytes);
  s = SafetensorsModel::Open(dir.Path("c.safetensors")).status();
  EXPECT_THAT(Msg(s), HasSubstr("are not a range within the 4-byte data"));
}

TEST(SafetensorsCorruptTest, UnknownDType) {
  TempDir dir("st");
  TinySpec s;
  std::vector<StEntry> entries = testing_util::TinyStEntries(s, DType::kF32);
  for (StEntry& e : entries) {
    if (e.name == "model.layers.1.self_attn.q_proj.weight") e.dtype = "I32";
  }
  testing_util::WriteBytes(dir.Path("config.json"),
                           testing_util::TinyHfConfig(s).dump());
  testing_util::WriteBytes(dir.Path("model.safetensors"),
                           testing_util::SafetensorsBytes(entries));
  auto w = LoadModel(dir.path());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Msg(w.status()),
              HasSubstr("tensor 'model.layers.1.self_attn.q_proj.weight' has "
                        "dtype I32"));
}

TEST(SafetensorsCorruptTest, UnsupportedConfig) {
  TempDir dir("st");
  TinySpec s;
  WriteFolder(dir, s, DType::kF32);
  nlohmann::json cfg = testing_util::TinyHfConfig(s);
  cfg["architectures"] = {"GPT2LMHeadModel"};
  testing_util::WriteBytes(dir.Path("config.json"), cfg.dump());
  EXPECT_THAT(Msg(LoadModel(dir.path()).status()),
              HasSubstr("architecture 'GPT2LMHeadModel' is not supported"));
  cfg = testing_util::TinyHfConfig(s);
  cfg["num_key_value_heads"] = 3;
  testing_util::WriteBytes(dir.Path("config.json"), cfg.dump());
  EXPECT_THAT(Msg(LoadModel(dir.path()).status()),
              HasSubstr("num_heads 4 is not a multiple of num_kv_heads 3"));
  cfg["num_key_value_heads"] = 5;
  testing_util::WriteBytes(dir.Path("config.json"), cfg.dump());
  EXPECT_THAT(Msg(LoadModel(dir.path()).status()),
              HasSubstr("num_kv_heads = 5 is out of range 1..4"));
  cfg = testing_util::TinyHfConfig(s);
  cfg.erase("hidden_size");
  testing_util::WriteBytes(dir.Path("config.json"), cfg.dump());
  EXPECT_THAT(Msg(LoadModel(dir.path()).status()),
              HasSubstr("\"hidden_size\" is missing"));
}

absl::StatusOr<std::unique_ptr<SafetensorsModel>> ParseCopy(
    const std::string& b) {
  auto owner = std::shared_ptr<char[]>(new char[b.size() + 1]);
  std::memcpy(owner.get(), b.data(), b.size());
  return SafetensorsModel::FromBuffer("fuzz.safetensors", owner, owner.get(),
                                      b.size());
}

TEST(SafetensorsFuzzTest, TruncationsAndBitFlipsNeverCrash) {
  const std::string bytes = testing_util::SafetensorsBytes(
      {{"a", "F32", {4, 2}, std::string(32, '\1')},
       {"b", "BF16", {3}, std::string(6, '\2')}});
  ASSERT_TRUE(ParseCopy(bytes).ok());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(ParseCopy(bytes.substr(0, n)).ok()) << n;
  }
  std::mt19937 rng(7);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string b = bytes;
    b[rng() % b.size()] ^= static_cast<char>(1 << (rng() % 8));
    auto m = ParseCopy(b);
    if (!m.ok()) continue;
    for (const auto& [name, t] : (*m)->tensors()) {
      if (t.num_bytes > 0) {
        volatile uint8_t x =
            static_cast<const uint8_t*>(t.data)[t.num_bytes - 1];
        (void)x;
      }
    }
  }
}

}  // namespace
}  // namespace pdserve
