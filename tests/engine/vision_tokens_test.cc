// The cumulative-sum injection against masked_scatter (a property test over
// random placements, with images first, last, adjacent and none), and the
// 3D positions against transformers' get_rope_index.
#include <random>
#include <string>
#include <vector>

#include "engine/model/image_tokens.h"
#include "gtest/gtest.h"
#include "tests/engine/vision_test_util.h"

namespace pdserve {
namespace {

using vision_test::kTinyVlDir;
using vision_test::ReadJson;

constexpr int32_t kImage = 75;
constexpr int64_t kHidden = 5;

// torch's masked_scatter over rows: the k-th masked row takes source row k.
std::vector<float> MaskedScatter(const std::vector<int32_t>& tokens,
                                 const std::vector<float>& text,
                                 const std::vector<float>& images) {
  std::vector<float> out = text;
  int64_t k = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] != kImage) continue;
    for (int64_t d = 0; d < kHidden; ++d) {
      out[i * kHidden + d] = images[k * kHidden + d];
    }
    ++k;
  }
  return out;
}

void ExpectSameAsMaskedScatter(const std::vector<int32_t>& tokens,
                               std::mt19937& rng, const std::string& what) {
  std::normal_distribution<float> normal;
  std::vector<float> text(tokens.size() * kHidden);
  for (float& v : text) v = normal(rng);
  int64_t rows = 0;
  for (int32_t t : tokens) rows += t == kImage ? 1 : 0;
  std::vector<float> images(rows * kHidden);
  for (float& v : images) v = normal(rng);
  std::vector<float> got = text;
  absl::Status s = InjectImageEmbeddings(tokens, kImage, images.data(), rows,
                                         kHidden, got.data());
  ASSERT_TRUE(s.ok()) << what << ": " << s;
  EXPECT_EQ(got, MaskedScatter(tokens, text, images)) << what;
}

// Images as runs of placeholders: `runs` lengths, each after `gap` text.
std::vector<int32_t> Layout(const std::vector<std::pair<int, int>>& gap_run,
                            int tail) {
  std::vector<int32_t> out;
  int32_t text = 3;
  for (auto [gap, run] : gap_run) {
    for (int i = 0; i < gap; ++i) out.push_back(text++);
    out.insert(out.end(), run, kImage);
  }
  for (int i = 0; i < tail; ++i) out.push_back(text++);
  return out;
}

TEST(InjectImageEmbeddingsTest, NamedPlacementsEqualMaskedScatter) {
  std::mt19937 rng(1);
  struct Case {
    const char* name;
    std::vector<int32_t> tokens;
  };
  const Case cases[] = {
      {"none", Layout({}, 6)},
      {"first", Layout({{0, 4}}, 3)},
      {"last", Layout({{3, 4}}, 0)},
      {"only", Layout({{0, 6}}, 0)},
      {"adjacent", Layout({{2, 4}, {0, 6}}, 2)},
      {"first and last", Layout({{0, 2}, {5, 3}}, 0)},
      {"adjacent at both ends", Layout({{0, 1}, {0, 1}, {4, 2}, {0, 2}}, 0)},
      {"one token", {kImage}},
      {"empty", {}},
  };
  for (const Case& c : cases) ExpectSameAsMaskedScatter(c.tokens, rng, c.name);
}

TEST(InjectImageEmbeddingsTest, RandomPlacementsEqualMaskedScatter) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = static_cast<int>(rng() % 48);
    const double p = (rng() % 5) / 4.0;  // 0, 1/4, ..., all placeholders
    std::bernoulli_distribution image(p);
    std::vector<int32_t> tokens(n);
    for (int32_t& t : tokens) {
      t = image(rng) ? kImage : static_cast<int32_t>(rng() % 70);
    }
    ExpectSameAsMaskedScatter(tokens, rng, "trial " + std::to_string(trial));
    if (HasFailure()) return;
  }
}

TEST(InjectImageEmbeddingsTest, RefusesACountMismatchAndWritesNothing) {
  const std::vector<int32_t> tokens = {1, kImage, kImage, kImage, 2};
  std::vector<float> embeds(tokens.size() * kHidden, 1.0f);
  std::vector<float> images(4 * kHidden, 9.0f);
  absl::Status s = InjectImageEmbeddings(tokens, kImage, images.data(), 4,
                                         kHidden, embeds.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("3 image placeholder tokens (id 75) but 4 "
                             "image embeddings"),
            std::string::npos)
      << s;
  EXPECT_EQ(embeds, std::vector<float>(tokens.size() * kHidden, 1.0f));
}

std::vector<ImageGrid> Grids(const nlohmann::json& j) {
  std::vector<ImageGrid> out;
  for (const auto& g : j) out.push_back({g[0], g[1], g[2]});
  return out;
}

void ExpectRopeIndex(const nlohmann::json& ids, const nlohmann::json& grids,
                     const nlohmann::json& positions, int64_t delta,
                     const std::string& what) {
  const std::vector<int32_t> tokens = ids.get<std::vector<int32_t>>();
  absl::StatusOr<MropePositions> got =
      ComputeMropePositions(tokens, kImage, Grids(grids), 2);
  ASSERT_TRUE(got.ok()) << what << ": " << got.status();
  for (int axis = 0; axis < 3; ++axis) {
    std::vector<int64_t> mine(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) mine[i] = got->thw[3 * i + axis];
    EXPECT_EQ(mine, positions[axis].get<std::vector<int64_t>>())
        << what << " axis " << axis;
  }
  EXPECT_EQ(got->rope_delta, delta) << what;
}

TEST(MropePositionsTest, EqualGetRopeIndex) {
  const nlohmann::json meta = ReadJson(kTinyVlDir + "/rope_index.json");
  ASSERT_EQ(meta["image_token_id"], kImage);
  for (const auto& c : meta["cases"]) {
    ExpectRopeIndex(c["ids"], c["grid_thw"], c["position_ids"],
                    c["rope_delta"], c["name"]);
  }
  const nlohmann::json lm = ReadJson(kTinyVlDir + "/expected.json");
  ExpectRopeIndex(lm["prompt_ids"], lm["grid_thw"], lm["position_ids"],
                  lm["rope_delta"], "golden prompt");
}

TEST(MropePositionsTest, AdjacentImagesSplitTheirRun) {
  // Two 2x2-token images back to back: the second starts where the first
  // ends (its position + 2), as if text separated them.
  std::vector<int32_t> tokens = {1, kImage, kImage, kImage, kImage, kImage,
                                 kImage, kImage, kImage, 2};
  absl::StatusOr<MropePositions> got = ComputeMropePositions(
      tokens, kImage, {ImageGrid{1, 4, 4}, ImageGrid{1, 4, 4}}, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->thw[3 * 5 + 0], 3);  // second image, first token: t
  EXPECT_EQ(got->thw[3 * 5 + 1], 3);
  EXPECT_EQ(got->thw[3 * 9 + 0], 5);  // text after: 1 + 2 + 2
  EXPECT_EQ(got->rope_delta, 6 - 10);
}

TEST(MropePositionsTest, RefusesPlaceholdersThatDoNotMatchTheGrids) {
  const std::vector<int32_t> three = {1, kImage, kImage, kImage, 2};
  absl::StatusOr<MropePositions> r =
      ComputeMropePositions(three, kImage, {ImageGrid{1, 4, 4}}, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("has 4 placeholder tokens but text "
                                      "interrupts it after 3"),
            std::string::npos)
      << r.status();
  r = ComputeMropePositions(three, kImage, {}, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("only 0 images"), std::string::npos);
  r = ComputeMropePositions({1, 2}, kImage, {ImageGrid{1, 2, 2}}, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cover 0 of 1 images"),
            std::string::npos)
      << r.status();
  r = ComputeMropePositions({1, kImage, kImage}, kImage, {ImageGrid{1, 4, 4}},
                            2);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("the last has 2 of its 4 tokens"),
            std::string::npos)
      << r.status();
}

TEST(MropePositionsTest, TextOnlyIsPlainPositions) {
  absl::StatusOr<MropePositions> r =
      ComputeMropePositions({5, 6, 7}, kImage, {}, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->thw, (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(r->rope_delta, 0);
}

}  // namespace
}  // namespace pdserve
