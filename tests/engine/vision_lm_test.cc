// The tiny Qwen3.5 VL fixture end to end in the forward pass: a prompt with
// two images of different sizes and text; pdserve decodes and preprocesses
// the images, encodes them, injects them by the cumulative-sum index at
// their mRoPE positions, and every prefill logit and 16 greedy decode steps
// (text positions + rope_delta) match transformers within 1e-4. Prefill in
// chunks that cut through the images gives the same logits (5e-5).
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "engine/image/image_decode.h"
#include "engine/image/image_preprocess.h"
#include "engine/kv/kv_storage.h"
#include "engine/loader/model_loader.h"
#include "engine/model/forward.h"
#include "engine/model/image_tokens.h"
#include "engine/model/vision_encoder.h"
#include "gtest/gtest.h"
#include "kernels/thread_pool.h"
#include "tests/engine/vision_test_util.h"

namespace pdserve {
namespace {

using vision_test::kTinyVlDir;
using vision_test::ReadF32;
using vision_test::ReadJson;

int32_t Argmax(const float* x, int64_t n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}

class VisionLmTest : public testing::Test {
 protected:
  void SetUp() override {
    auto w = LoadModel(kTinyVlDir);
    ASSERT_TRUE(w.ok()) << w.status();
    w_ = std::move(*w);
    meta_ = ReadJson(kTinyVlDir + "/expected.json");
    expected_ = ReadF32(kTinyVlDir + "/expected_logits.f32");
    prompt_ = meta_["prompt_ids"].get<std::vector<int32_t>>();
    auto enc = VisionEncoder::Create(*w_, pool_);
    ASSERT_TRUE(enc.ok()) << enc.status();
    ImagePreprocessConfig pre = w_->config.vision.preprocess;
    pre.min_pixels = meta_["min_pixels"];
    pre.max_pixels = meta_["max_pixels"];
    for (const auto& name : meta_["images"]) {
      const ImagePatches patches =
          vision_test::PreprocessFixture(name.get<std::string>(), pre);
      grids_.push_back(patches.grid);
      const int64_t rows = (*enc)->OutputRows(patches.grid);
      const size_t at = embeds_.size();
      embeds_.resize(at + rows * w_->config.hidden_size);
      ASSERT_TRUE((*enc)
                      ->Encode(patches, absl::MakeSpan(embeds_.data() + at,
                                                       embeds_.size() - at))
                      .ok());
      image_rows_ += rows;
    }
    auto pos = ComputeMropePositions(prompt_, w_->config.vision.image_token_id,
                                     grids_, w_->config.vision.merge_size());
    ASSERT_TRUE(pos.ok()) << pos.status();
    positions_ = *pos;
  }

  // One sequence over its own KV pages.
  struct Runner {
    Runner(const ModelWeights& w, ThreadPool& pool)
        : kv(w.config.num_kv_layers(), w.config.kv_dim(), 16, 8, KvDType::kF32,
             w.config.head_dim),
          pages(8),
          state(w.config.linear_state_floats(), 3.0f) {
      std::iota(pages.begin(), pages.end(), 0);
      auto f = ForwardPass::Create(w, kv, pool, 64);
      EXPECT_TRUE(f.ok()) << f.status();
      fp = std::move(*f);
    }
    KvStorage kv;
    std::vector<int32_t> pages;
    std::vector<float> state;
    std::unique_ptr<ForwardPass> fp;
  };

  // Prefills the prompt in chunks of `chunk` tokens, each carrying its
  // slice of the image embeddings and positions; returns every row.
  std::vector<float> Prefill(Runner& run, int64_t chunk) {
    const int64_t n = static_cast<int64_t>(prompt_.size());
    const int64_t hidden = w_->config.hidden_size;
    const int32_t image = w_->config.vision.image_token_id;
    std::vector<float> all;
    int64_t images_before = 0;
    for (int64_t start = 0; start < n; start += chunk) {
      const int64_t len = std::min(chunk, n - start);
      SequenceSpan s;
      s.tokens = absl::MakeConstSpan(prompt_).subspan(start, len);
      s.start_pos = start;
      s.page_table = run.pages;
      s.all_logits = true;
      s.linear_state = run.state.data();
      s.rope_delta = positions_.rope_delta;
      s.mrope_positions =
          absl::MakeConstSpan(positions_.thw).subspan(3 * start, 3 * len);
      const int64_t rows = std::count(s.tokens.begin(), s.tokens.end(), image);
      if (rows > 0) {
        s.image_embeds = embeds_.data() + images_before * hidden;
        s.image_rows = rows;
      }
      images_before += rows;
      std::vector<float> logits(len * w_->config.vocab_size);
      absl::Status st = run.fp->Run({s}, absl::MakeSpan(logits));
      EXPECT_TRUE(st.ok()) << st;
      all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
  }

  ThreadPool pool_{2};
  std::unique_ptr<ModelWeights> w_;
  nlohmann::json meta_;
  std::vector<float> expected_;
  std::vector<int32_t> prompt_;
  std::vector<ImageGrid> grids_;
  std::vector<float> embeds_;  // all images, prompt order
  int64_t image_rows_ = 0;
  MropePositions positions_;
};

TEST_F(VisionLmTest, PrefillAndGreedyDecodeMatchTransformers) {
  const int64_t vocab = meta_["vocab_size"];
  const auto decode = meta_["decode_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(w_->config.vocab_size, vocab);
  ASSERT_EQ(expected_.size(), (prompt_.size() + decode.size()) * vocab);
  EXPECT_EQ(positions_.rope_delta, meta_["rope_delta"]);
  Runner run(*w_, pool_);
  std::vector<float> got = Prefill(run, static_cast<int64_t>(prompt_.size()));
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(got[i] - expected_[i])));
  }
  EXPECT_LE(worst, 1e-4) << "prefill";
  std::vector<float> last(got.end() - vocab, got.end());
  const int64_t n = static_cast<int64_t>(prompt_.size());
  for (size_t k = 0; k < decode.size(); ++k) {
    ASSERT_EQ(Argmax(last.data(), vocab), decode[k]) << "decode step " << k;
    SequenceSpan s;
    s.tokens = absl::MakeConstSpan(&decode[k], 1);
    s.start_pos = n + static_cast<int64_t>(k);
    s.page_table = run.pages;
    s.linear_state = run.state.data();
    s.rope_delta = positions_.rope_delta;
    ASSERT_TRUE(run.fp->Run({s}, absl::MakeSpan(last)).ok());
    const float* want = expected_.data() + (n + k) * vocab;
    for (int64_t i = 0; i < vocab; ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(last[i] - want[i])));
    }
  }
  EXPECT_LE(worst, 1e-4) << "prefill + decode";
  RecordProperty("max_abs_error", std::to_string(worst));
}

TEST_F(VisionLmTest, ChunksThroughTheImagesGiveTheSameLogits) {
  Runner whole(*w_, pool_);
  const std::vector<float> ref =
      Prefill(whole, static_cast<int64_t>(prompt_.size()));
  for (int64_t chunk : {1, 4, 7, 13}) {
    Runner run(*w_, pool_);
    const std::vector<float> got = Prefill(run, chunk);
    ASSERT_EQ(got.size(), ref.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(got[i] - ref[i])));
    }
    // Chunks of 1 take the recurrent form of the delta rule, longer ones
    // the chunked form: equal up to f32 rounding.
    EXPECT_LE(worst, 5e-5) << "chunk " << chunk;
  }
}

TEST_F(VisionLmTest, WithoutTheImagesTheLogitsDiffer) {
  // The placeholders embedded as plain tokens and text positions: a real
  // change, so the goldens above test the injection and positions.
  Runner run(*w_, pool_);
  SequenceSpan s;
  s.tokens = prompt_;
  s.page_table = run.pages;
  s.all_logits = true;
  s.linear_state = run.state.data();
  std::vector<float> logits(prompt_.size() * w_->config.vocab_size);
  ASSERT_TRUE(run.fp->Run({s}, absl::MakeSpan(logits)).ok());
  double diff = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(logits[i] - expected_[i])));
  }
  EXPECT_GT(diff, 0.1);
}

TEST_F(VisionLmTest, RefusesMismatchedImageRowsAndPositions) {
  Runner run(*w_, pool_);
  SequenceSpan s;
  s.tokens = prompt_;
  s.page_table = run.pages;
  s.linear_state = run.state.data();
  s.image_embeds = embeds_.data();
  s.image_rows = image_rows_ - 1;
  std::vector<float> logits(w_->config.vocab_size);
  absl::Status st = run.fp->Run({s}, absl::MakeSpan(logits));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(absl::StrCat(image_rows_ - 1,
                                           " image embeddings for ",
                                           image_rows_, " image placeholder")),
            std::string::npos)
      << st;
  s.image_rows = image_rows_;
  s.mrope_positions = absl::MakeConstSpan(positions_.thw).subspan(3);
  st = run.fp->Run({s}, absl::MakeSpan(logits));
  EXPECT_NE(st.message().find("mRoPE positions for"), std::string::npos) << st;
}

}  // namespace
}  // namespace pdserve
