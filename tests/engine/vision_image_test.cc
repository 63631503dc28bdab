// Image decoding and the Qwen-VL preprocessing against transformers'
// Qwen2VLImageProcessor (torchvision backend) on the committed images:
// the same grid, and pixel values within 1/255 of the reference's (in
// intensity units, before normalisation).
#include <cmath>
#include <string>

#include "engine/image/image_decode.h"
#include "engine/image/image_preprocess.h"
#include "gtest/gtest.h"
#include "tests/engine/vision_test_util.h"

namespace pdserve {
namespace {

using vision_test::kVisionDir;
using vision_test::ReadBytes;
using vision_test::ReadJson;

TEST(SmartResizeTest, MatchesTheReferenceOnRandomSizes) {
  const nlohmann::json table = ReadJson(kVisionDir + "/smart_resize.json");
  const int64_t factor = table["factor"];
  int refused = 0;
  for (const auto& row : table["rows"]) {
    const int64_t h = row[0], w = row[1], lo = row[2], hi = row[3];
    absl::StatusOr<std::array<int64_t, 2>> got =
        SmartResize(h, w, factor, lo, hi);
    if (row[4] == -1) {
      ++refused;
      ASSERT_FALSE(got.ok()) << h << "x" << w;
      EXPECT_NE(got.status().message().find("aspect ratio"), std::string::npos)
          << got.status();
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ((*got)[0], row[4]) << h << "x" << w << " " << lo << ".." << hi;
    EXPECT_EQ((*got)[1], row[5]) << h << "x" << w << " " << lo << ".." << hi;
  }
  EXPECT_GT(refused, 0);
}

TEST(SmartResizeTest, RefusesBadArguments) {
  EXPECT_FALSE(SmartResize(0, 10, 32, 1024, 4096).ok());
  EXPECT_FALSE(SmartResize(10, 10, 32, 4096, 1024).ok());
  absl::StatusOr<std::array<int64_t, 2>> r = SmartResize(1, 300, 32, 1, 4096);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("got 300"), std::string::npos)
      << r.status();
}

TEST(ImageDecodeTest, ProbesEachFormat) {
  struct Case {
    const char* file;
    ImageFormat format;
    int64_t w, h;
  };
  for (const Case& c : {Case{"gradient_37x53.png", ImageFormat::kPng, 53, 37},
                        Case{"photo_90x70.jpg", ImageFormat::kJpeg, 70, 90},
                        Case{"lossy_50x40.webp", ImageFormat::kWebp, 40, 50},
                        Case{"lossless_33x66.webp", ImageFormat::kWebp, 66,
                             33}}) {
    const std::string bytes = ReadBytes(kVisionDir + "/images/" + c.file);
    absl::StatusOr<ImageInfo> info = ProbeImage(bytes);
    ASSERT_TRUE(info.ok()) << c.file << ": " << info.status();
    EXPECT_EQ(info->format, c.format) << c.file;
    EXPECT_EQ(info->width, c.w) << c.file;
    EXPECT_EQ(info->height, c.h) << c.file;
  }
}

TEST(ImageDecodeTest, RefusesBadInputWithAClearMessage) {
  absl::StatusOr<RgbImage> r = DecodeImage("GIF89a....", 1 << 20);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not a PNG, JPEG or WebP"),
            std::string::npos)
      << r.status();
  EXPECT_FALSE(DecodeImage("", 1 << 20).ok());

  const std::string png = ReadBytes(kVisionDir + "/images/big_96x128.png");
  r = DecodeImage(png, 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("128 x 96 = 12288 pixels, more than "
                                      "the limit of 1000"),
            std::string::npos)
      << r.status();
  for (const char* file : {"big_96x128.png", "photo_90x70.jpg",
                           "lossy_50x40.webp"}) {
    const std::string bytes = ReadBytes(kVisionDir + "/images/" + file);
    for (size_t keep : {size_t{10}, size_t{30}, bytes.size() / 2}) {
      r = DecodeImage(bytes.substr(0, keep), 1 << 20);
      if (r.ok()) continue;  // libjpeg pads a truncated scan with grey
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
          << file << " " << keep;
    }
  }
}

TEST(ImageDecodeTest, ConvertsToRgbLikePil) {
  // Grey is replicated into three equal channels; alpha is dropped.
  absl::StatusOr<RgbImage> grey =
      DecodeImage(ReadBytes(kVisionDir + "/images/gray_45x45.png"), 1 << 20);
  ASSERT_TRUE(grey.ok()) << grey.status();
  for (int64_t i = 0; i < grey->num_pixels(); ++i) {
    ASSERT_EQ(grey->pixels[i * 3], grey->pixels[i * 3 + 1]);
    ASSERT_EQ(grey->pixels[i * 3], grey->pixels[i * 3 + 2]);
  }
  absl::StatusOr<RgbImage> rgba =
      DecodeImage(ReadBytes(kVisionDir + "/images/rgba_30x70.png"), 1 << 20);
  ASSERT_TRUE(rgba.ok()) << rgba.status();
  EXPECT_EQ(rgba->pixels.size(), size_t{30 * 70 * 3});
}

TEST(ImagePreprocessTest, ResizeToTheSameSizeIsTheIdentity) {
  RgbImage img{3, 2, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                      17, 18}};
  RgbImage same = ResizeBicubic(img, 2, 3);
  EXPECT_EQ(same.pixels, img.pixels);
}

// Every case of preprocess.json: decode the image, preprocess with its
// limits, compare grid and every pixel value with the reference's.
TEST(ImagePreprocessTest, MatchesTheReferenceProcessor) {
  const nlohmann::json meta = ReadJson(kVisionDir + "/preprocess.json");
  const std::string levels =
      ReadBytes(kVisionDir + "/" + meta["levels_file"].get<std::string>());
  ImagePreprocessConfig config;
  config.patch_size = meta["patch_size"];
  config.temporal_patch_size = meta["temporal_patch_size"];
  config.merge_size = meta["merge_size"];
  for (const auto& c : meta["cases"]) {
    const std::string name = c["image"];
    config.min_pixels = c["min_pixels"];
    config.max_pixels = c["max_pixels"];
    SCOPED_TRACE(name + " " + std::to_string(config.min_pixels) + ".." +
                 std::to_string(config.max_pixels));
    absl::StatusOr<RgbImage> img =
        DecodeImage(ReadBytes(kVisionDir + "/images/" + name), 1 << 24);
    ASSERT_TRUE(img.ok()) << img.status();
    absl::StatusOr<ImagePatches> got = PreprocessImage(*img, config);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->grid.t, c["grid_thw"][0]);
    EXPECT_EQ(got->grid.h, c["grid_thw"][1]);
    EXPECT_EQ(got->grid.w, c["grid_thw"][2]);
    const int64_t n = c["patches"].get<int64_t>() * c["patch_dim"].get<int64_t>();
    ASSERT_EQ(static_cast<int64_t>(got->values.size()), n);
    const int64_t offset = c["offset"];
    double worst = 0;
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float level = static_cast<uint8_t>(levels[offset + i]);
      const float ref = (level / 255.0f - 0.5f) / 0.5f;
      // In intensity units (0..1): value * std.
      const double d = std::fabs(got->values[i] - ref) * 0.5;
      worst = std::max(worst, d);
      differ += d > 1e-6 ? 1 : 0;
    }
    EXPECT_LE(worst, 1.0 / 255 + 1e-6) << differ << " of " << n << " differ";
    // Lossless formats decode identically everywhere, and the resampling
    // follows torch's integer arithmetic: exact.
    if (name.find(".png") != std::string::npos) EXPECT_EQ(differ, 0);
    RecordProperty(name + "_levels_differing", static_cast<int>(differ));
  }
}

}  // namespace
}  // namespace pdserve
