// Images through EngineCore on the tiny Qwen3.5 VL fixture: a sequence
// admitted with its two images (the encoded files) streams the greedy
// tokens of the transformers golden, whatever the prefill chunks; a second
// sequence with the same images takes them from the encoder-output cache;
// bad images and mismatched placeholders are refused naming the numbers.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/engine_core.h"
#include "engine/image/image_preprocess.h"
#include "engine/loader/model_loader.h"
#include "engine/model/sampler.h"
#include "gtest/gtest.h"
#include "kernels/thread_pool.h"
#include "tests/engine/vision_test_util.h"

namespace pdserve {
namespace {

using vision_test::kTinyVlDir;
using vision_test::kVisionDir;
using vision_test::ReadBytes;
using vision_test::ReadJson;

class VisionEngineTest : public testing::Test {
 protected:
  void SetUp() override {
    auto loaded = LoadModel(kTinyVlDir);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    weights_ = std::move(*loaded);
    meta_ = ReadJson(kTinyVlDir + "/expected.json");
    prompt_ = meta_["prompt_ids"].get<std::vector<int32_t>>();
    golden_ = meta_["decode_ids"].get<std::vector<int32_t>>();
    for (const auto& name : meta_["images"]) {
      files_.push_back(
          ReadBytes(kVisionDir + "/images/" + name.get<std::string>()));
    }
    for (const auto& g : meta_["grid_thw"]) grids_.push_back({g[0], g[1], g[2]});
    EngineOptions o;
    o.kv_memory.bytes = 8 << 20;
    o.max_sequences = 4;
    o.max_step_tokens = 64;
    auto engine = EngineCore::Create(weights_, &threads_, o);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
  }

  std::vector<SequenceImage> Images() const {
    std::vector<SequenceImage> out;
    for (size_t i = 0; i < files_.size(); ++i) {
      out.push_back({files_[i], grids_[i]});
    }
    return out;
  }

  // Runs sequence `id` to its end: prefill chunks of `chunk`, then decodes.
  std::vector<int32_t> Run(SequenceId id, int64_t chunk, StepResult* first) {
    std::vector<int32_t> out;
    int64_t pos = 0;
    const int64_t n = static_cast<int64_t>(prompt_.size());
    for (int step = 0; step < 100; ++step) {
      const int64_t left = n - pos;
      StepResult r;
      absl::Status s = engine_->Step(
          {{id, static_cast<int32_t>(left > 0 ? std::min(chunk, left) : 1)}},
          &r);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok()) break;
      if (step == 0 && first != nullptr) *first = r;
      pos += r.sequences[0].tokens_processed;
      if (r.sequences[0].has_token) out.push_back(r.sequences[0].token);
      if (r.sequences[0].finish != FinishReason::kNone) break;
    }
    return out;
  }

  ThreadPool threads_{2};
  std::shared_ptr<const ModelWeights> weights_;
  std::unique_ptr<EngineCore> engine_;
  nlohmann::json meta_;
  std::vector<int32_t> prompt_, golden_;
  std::vector<std::string> files_;
  std::vector<ImageGrid> grids_;
};

TEST_F(VisionEngineTest, StreamsTheGoldenTokensAndCachesTheEncoder) {
  SamplingParams greedy;
  const int64_t n_new = static_cast<int64_t>(golden_.size());
  ASSERT_TRUE(engine_
                  ->AddSequence(1, prompt_, 128, greedy, {}, n_new, nullptr, 0,
                                Images())
                  .ok());
  StepResult first;
  EXPECT_EQ(Run(1, 64, &first), golden_);
  EXPECT_EQ(first.images_encoded, 2);
  EXPECT_GT(first.encode_ns, 0);
  ASSERT_TRUE(engine_->Release(1).ok());

  // The same files again, prefilled in chunks that cut the images: the
  // encoder is not run and the tokens are the same.
  for (int64_t chunk : {3, 8}) {
    const SequenceId id = 10 + chunk;
    ASSERT_TRUE(engine_
                    ->AddSequence(id, prompt_, 128, greedy, {}, n_new, nullptr,
                                  0, Images())
                    .ok());
    EXPECT_EQ(Run(id, chunk, &first), golden_) << "chunk " << chunk;
    EXPECT_EQ(first.images_encoded, 0);
    ASSERT_TRUE(engine_->Release(id).ok());
  }
  const EngineStats stats = engine_->Stats();
  EXPECT_EQ(stats.images, 6);
  EXPECT_EQ(stats.image_cache_hits, 4);
}

TEST_F(VisionEngineTest, RefusesBadImagesNamingTheNumbers) {
  SamplingParams greedy;
  std::vector<SequenceImage> images = Images();
  images[1].grid = {1, 6, 6};
  absl::Status s =
      engine_->AddSequence(2, prompt_, 128, greedy, {}, 4, nullptr, 0, images);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("image 1 has a grid of 1 x 4 x 4 patches, but "
                             "its placeholders were sized for 1 x 6 x 6"),
            std::string::npos)
      << s;
  images = Images();
  images[0].bytes = "not an image at all";
  s = engine_->AddSequence(2, prompt_, 128, greedy, {}, 4, nullptr, 0, images);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("image 0: not a PNG, JPEG or WebP"),
            std::string::npos)
      << s;
  images = Images();
  images.pop_back();
  s = engine_->AddSequence(2, prompt_, 128, greedy, {}, 4, nullptr, 0, images);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("only 1 images"), std::string::npos) << s;
  // Nothing was admitted: the id is free.
  EXPECT_TRUE(engine_
                  ->AddSequence(2, prompt_, 128, greedy, {}, 4, nullptr, 0,
                                Images())
                  .ok());
}

TEST(VisionEngineTextModelTest, RefusesImagesWithoutAVisionTower) {
  auto loaded =
      LoadModel(std::string(PDSERVE_TESTDATA_DIR) + "/hybrid/tiny_qwen35");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::shared_ptr<const ModelWeights> w = std::move(*loaded);
  ThreadPool threads(1);
  EngineOptions o;
  o.kv_memory.bytes = 4 << 20;
  o.max_sequences = 2;
  auto engine = EngineCore::Create(w, &threads, o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::string png = ReadBytes(kVisionDir + "/images/noise_48x64.png");
  const SequenceImage img{png, {1, 4, 4}};
  absl::Status s = (*engine)->AddSequence(1, {1, 2, 3}, 64, SamplingParams(),
                                          {}, 4, nullptr, 0, {img});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("has 1 images but model tiny_qwen35 has no "
                             "vision tower"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace pdserve
