// Fixture IO for the vision tests (tests/data/vision, written by
// tests/tools/make_vision_fixtures.py).
#ifndef PDSERVE_TESTS_ENGINE_VISION_TEST_UTIL_H_
#define PDSERVE_TESTS_ENGINE_VISION_TEST_UTIL_H_

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/image/image_decode.h"
#include "engine/image/image_preprocess.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdserve::vision_test {

inline const std::string kVisionDir =
    std::string(PDSERVE_TESTDATA_DIR) + "/vision";
inline const std::string kTinyVlDir = kVisionDir + "/tiny_qwen35_vl";

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline nlohmann::json ReadJson(const std::string& path) {
  return nlohmann::json::parse(ReadBytes(path));
}

inline std::vector<float> ReadF32(const std::string& path) {
  const std::string bytes = ReadBytes(path);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::copy(bytes.begin(), bytes.begin() + out.size() * sizeof(float),
            reinterpret_cast<char*>(out.data()));
  return out;
}

// tests/data/vision/images/`image` decoded and preprocessed with `config`.
inline ImagePatches PreprocessFixture(const std::string& image,
                                      const ImagePreprocessConfig& config) {
  absl::StatusOr<RgbImage> img =
      DecodeImage(ReadBytes(kVisionDir + "/images/" + image), 1 << 24);
  EXPECT_TRUE(img.ok()) << image << ": " << img.status();
  if (!img.ok()) return {};
  absl::StatusOr<ImagePatches> p = PreprocessImage(*img, config);
  EXPECT_TRUE(p.ok()) << image << ": " << p.status();
  return p.ok() ? *std::move(p) : ImagePatches();
}

}  // namespace pdserve::vision_test

#endif  // PDSERVE_TESTS_ENGINE_VISION_TEST_UTIL_H_
