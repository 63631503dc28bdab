// The vision tower of the tiny Qwen3.5 VL fixture (loaded from its
// safetensors checkpoint) against transformers' Qwen3_5VisionModel
// pooler_output: images decoded and preprocessed by pdserve, every output
// within 1e-4 (fp32).
#include <cmath>
#include <memory>
#include <string>

#include "engine/image/image_decode.h"
#include "engine/image/image_preprocess.h"
#include "engine/loader/model_loader.h"
#include "engine/loader/vision_loader.h"
#include "engine/model/packed_weights.h"
#include "engine/model/vision_encoder.h"
#include "gtest/gtest.h"
#include "kernels/dtype.h"
#include "kernels/thread_pool.h"
#include "tests/engine/vision_test_util.h"

namespace pdserve {
namespace {

using vision_test::kTinyVlDir;
using vision_test::kVisionDir;
using vision_test::ReadF32;
using vision_test::ReadJson;

std::unique_ptr<ModelWeights> LoadTinyVl() {
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(kTinyVlDir);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? std::move(*w) : nullptr;
}

TEST(VisionConfigTest, ReadsTheVisionConfigAndPreprocessor) {
  std::unique_ptr<ModelWeights> w = LoadTinyVl();
  ASSERT_NE(w, nullptr);
  const ModelConfig& c = w->config;
  EXPECT_EQ(c.arch, Architecture::kQwen35);
  const VisionConfig& v = c.vision;
  ASSERT_TRUE(v.present());
  EXPECT_EQ(v.depth, 2);
  EXPECT_EQ(v.hidden_size, 32);
  EXPECT_EQ(v.num_heads, 2);
  EXPECT_EQ(v.intermediate_size, 48);
  EXPECT_EQ(v.out_hidden_size, 32);
  EXPECT_EQ(v.grid_side(), 4);
  EXPECT_TRUE(v.gelu_tanh);
  EXPECT_EQ(v.image_token_id, 75);
  EXPECT_EQ(v.vision_start_token_id, 73);
  EXPECT_EQ(v.vision_end_token_id, 74);
  EXPECT_EQ(v.preprocess.patch_size, 16);
  EXPECT_EQ(v.preprocess.min_pixels, 64 * 64);
  EXPECT_EQ(v.preprocess.max_pixels, 128 * 128);
  EXPECT_EQ(v.patch_dim(), 3 * 2 * 16 * 16);
  EXPECT_EQ(w->vision.blocks.size(), 2u);
  EXPECT_EQ(w->vision.merger_fc1.rows, 128);
}

// Every image of encoder.json through `w`'s tower: within 1e-4 of
// transformers' pooler_output.
void ExpectEncoderGoldens(const ModelWeights& w, const std::string& tag) {
  ThreadPool pool(2);
  absl::StatusOr<std::unique_ptr<VisionEncoder>> enc =
      VisionEncoder::Create(w, pool);
  ASSERT_TRUE(enc.ok()) << enc.status();
  const nlohmann::json meta = ReadJson(kTinyVlDir + "/encoder.json");
  const std::vector<float> golden =
      ReadF32(kTinyVlDir + "/" + meta["file"].get<std::string>());
  ImagePreprocessConfig pre = w.config.vision.preprocess;
  pre.min_pixels = meta["min_pixels"];
  pre.max_pixels = meta["max_pixels"];
  for (const auto& img : meta["images"]) {
    const std::string name = img["image"];
    SCOPED_TRACE(name);
    ImagePatches patches = vision_test::PreprocessFixture(name, pre);
    EXPECT_EQ(patches.grid.h, img["grid_thw"][1]);
    EXPECT_EQ(patches.grid.w, img["grid_thw"][2]);
    const int64_t rows = (*enc)->OutputRows(patches.grid);
    ASSERT_EQ(rows, img["tokens"]);
    std::vector<float> out(rows * (*enc)->out_hidden(), NAN);
    ASSERT_TRUE((*enc)->Encode(patches, absl::MakeSpan(out)).ok());
    const float* want = golden.data() + img["offset"].get<int64_t>();
    double worst = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(out[i] - want[i])));
    }
    EXPECT_LE(worst, 1e-4);
    testing::Test::RecordProperty(tag + name + "_max_abs_error",
                                  std::to_string(worst));
  }
}

TEST(VisionEncoderTest, MatchesTransformersPerImage) {
  std::unique_ptr<ModelWeights> w = LoadTinyVl();
  ASSERT_NE(w, nullptr);
  ExpectEncoderGoldens(*w, "hf_");
}

// `v` (f32) rounded to bf16, its storage owned by `w`.
WeightView ToBf16(const WeightView& v, ModelWeights& w) {
  auto bf = std::make_shared<std::vector<uint16_t>>(v.rows * v.cols);
  for (int64_t r = 0; r < v.rows; ++r) {
    const auto* row = reinterpret_cast<const float*>(v.row(r));
    for (int64_t c = 0; c < v.cols; ++c) {
      (*bf)[r * v.cols + c] = F32ToBF16(row[c]);
    }
  }
  WeightView out = v;
  out.type = DType::kBF16;
  out.row_bytes = v.cols * 2;
  out.data = bf->data();
  out.packed = nullptr;
  w.storage.push_back(bf);
  return out;
}

// A bf16 tower (as Qwen3.5's checkpoints ship) also attends in bf16: within
// bf16's rounding of the fp32 goldens, with the matrices row-major and
// packed for the active kernels as the CPU backend packs them.
TEST(VisionEncoderTest, Bf16TowerStaysNearTheGoldens) {
  std::unique_ptr<ModelWeights> w = LoadTinyVl();
  ASSERT_NE(w, nullptr);
  VisionWeights& v = w->vision;
  ASSERT_EQ(v.patch_embed.type, DType::kF32);
  v.patch_embed = ToBf16(v.patch_embed, *w);
  for (VisionBlockWeights& b : v.blocks) {
    for (WeightView* m : {&b.qkv, &b.proj, &b.fc1, &b.fc2}) {
      *m = ToBf16(*m, *w);
    }
  }
  v.merger_fc1 = ToBf16(v.merger_fc1, *w);
  v.merger_fc2 = ToBf16(v.merger_fc2, *w);
  ThreadPool pool(2);
  const std::unique_ptr<const PackedModel> packed = PackModelForCpu(*w, pool);
  const nlohmann::json meta = ReadJson(kTinyVlDir + "/encoder.json");
  const std::vector<float> golden =
      ReadF32(kTinyVlDir + "/" + meta["file"].get<std::string>());
  ImagePreprocessConfig pre = w->config.vision.preprocess;
  pre.min_pixels = meta["min_pixels"];
  pre.max_pixels = meta["max_pixels"];
  for (const ModelWeights* model :
       {static_cast<const ModelWeights*>(w.get()), &packed->weights}) {
    absl::StatusOr<std::unique_ptr<VisionEncoder>> enc =
        VisionEncoder::Create(*model, pool);
    ASSERT_TRUE(enc.ok()) << enc.status();
    for (const auto& img : meta["images"]) {
      SCOPED_TRACE(img["image"].get<std::string>());
      ImagePatches patches = vision_test::PreprocessFixture(img["image"], pre);
      std::vector<float> out((*enc)->OutputRows(patches.grid) *
                                 (*enc)->out_hidden(),
                             NAN);
      ASSERT_TRUE((*enc)->Encode(patches, absl::MakeSpan(out)).ok());
      const float* want = golden.data() + img["offset"].get<int64_t>();
      double worst = 0, scale = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        worst = std::max(worst, double{std::fabs(out[i] - want[i])});
        scale = std::max(scale, double{std::fabs(want[i])});
      }
      EXPECT_GT(worst, 0.0);  // it did round: not the f32 path
      EXPECT_LE(worst, 0.03 * scale) << "largest |golden| " << scale;
      testing::Test::RecordProperty(
          "bf16_" + img["image"].get<std::string>() + "_relative_error",
          std::to_string(worst / scale));
    }
  }
}

// The same tower converted by llama.cpp's own converter (--mmproj), attached
// to a text GGUF of the same width: llama.cpp's names and shapes, the same
// outputs.
TEST(VisionEncoderTest, MmprojFromLlamaCppGivesTheSameOutputs) {
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(
      std::string(PDSERVE_TESTDATA_DIR) + "/hybrid/tiny_qwen35.gguf");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE((*w)->config.vision.present());
  absl::Status s =
      AttachMmproj(kVisionDir + "/tiny_qwen35_vl.mmproj.gguf", nullptr, **w);
  ASSERT_TRUE(s.ok()) << s;
  const VisionConfig& v = (*w)->config.vision;
  EXPECT_EQ(v.depth, 2);
  EXPECT_EQ(v.hidden_size, 32);
  EXPECT_EQ(v.num_heads, 2);
  EXPECT_EQ(v.intermediate_size, 48);
  EXPECT_EQ(v.out_hidden_size, 32);
  EXPECT_EQ(v.num_position_embeddings, 16);
  EXPECT_EQ(v.preprocess.temporal_patch_size, 2);
  EXPECT_EQ(v.preprocess.merge_size, 2);
  EXPECT_NEAR(v.layer_norm_eps, 1e-6, 1e-9);
  ExpectEncoderGoldens(**w, "mmproj_");
}

TEST(VisionEncoderTest, MmprojMustMatchTheModelWidth) {
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(
      std::string(PDSERVE_TESTDATA_DIR) + "/hybrid/tiny_qwen3_next.gguf");
  ASSERT_TRUE(w.ok()) << w.status();
  (*w)->config.hidden_size = 48;  // as if another model
  absl::Status s =
      AttachMmproj(kVisionDir + "/tiny_qwen35_vl.mmproj.gguf", nullptr, **w);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("projects to 32 features but model"),
            std::string::npos)
      << s;
  EXPECT_FALSE(AttachMmproj(kVisionDir + "/missing.gguf", nullptr, **w).ok());
}

TEST(VisionEncoderTest, RefusesMismatchedInput) {
  std::unique_ptr<ModelWeights> w = LoadTinyVl();
  ASSERT_NE(w, nullptr);
  ThreadPool pool(1);
  auto enc = VisionEncoder::Create(*w, pool);
  ASSERT_TRUE(enc.ok());
  ImagePatches p;
  p.grid = {1, 4, 4};
  p.patch_dim = w->config.vision.patch_dim();
  p.values.assign(16 * p.patch_dim, 0.0f);
  std::vector<float> out(4 * 32);
  EXPECT_TRUE((*enc)->Encode(p, absl::MakeSpan(out)).ok());
  std::vector<float> small(3 * 32);
  absl::Status s = (*enc)->Encode(p, absl::MakeSpan(small));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("need 128"), std::string::npos) << s;
  p.grid = {1, 3, 4};
  s = (*enc)->Encode(p, absl::MakeSpan(out));
  EXPECT_NE(s.message().find("multiple of the merge size 2"), std::string::npos)
      << s;
  p.grid = {1, 4, 4};
  p.values.pop_back();
  EXPECT_FALSE((*enc)->Encode(p, absl::MakeSpan(out)).ok());
}

TEST(VisionEncoderTest, TextOnlyModelHasNoEncoder) {
  absl::StatusOr<std::unique_ptr<ModelWeights>> w =
      LoadModel(std::string(PDSERVE_TESTDATA_DIR) + "/hybrid/tiny_qwen35");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE((*w)->config.vision.present());
  ThreadPool pool(1);
  EXPECT_EQ(VisionEncoder::Create(**w, pool).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdserve
