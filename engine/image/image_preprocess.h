// Image preprocessing of the Qwen2-VL / Qwen3-VL / Qwen3.5 processor
// (transformers' Qwen2VLImageProcessor): resize to the grid smart_resize
// picks within [min_pixels, max_pixels], antialiased bicubic as PIL and
// torchvision resample uint8 images, rescale and normalise, then split into
// temporal x spatial patches in spatial-merge-block order. Pure; thread-safe.
#ifndef PDSERVE_ENGINE_IMAGE_IMAGE_PREPROCESS_H_
#define PDSERVE_ENGINE_IMAGE_IMAGE_PREPROCESS_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/image/image_decode.h"

namespace pdserve {

// The processor's settings (preprocessor_config.json; defaults are
// Qwen3.5's / Qwen3-VL's).
struct ImagePreprocessConfig {
  int64_t patch_size = 16;           // pixels per patch side
  int64_t temporal_patch_size = 2;   // frames per patch (an image repeats)
  int64_t merge_size = 2;            // patches per LM token side
  int64_t min_pixels = 65536;        // size.shortest_edge
  int64_t max_pixels = 16777216;     // size.longest_edge
  std::array<float, 3> mean = {0.5f, 0.5f, 0.5f};
  std::array<float, 3> std = {0.5f, 0.5f, 0.5f};

  // Side of the square every resized dimension is a multiple of.
  int64_t factor() const { return patch_size * merge_size; }
  // Floats per patch: 3 channels x temporal x patch x patch.
  int64_t patch_dim() const {
    return 3 * temporal_patch_size * patch_size * patch_size;
  }
};

// The patch grid of one image (temporal, height, width in patches; an image
// has t = 1).
struct ImageGrid {
  int64_t t = 1;
  int64_t h = 0;
  int64_t w = 0;

  int64_t num_patches() const { return t * h * w; }
  // Language-model tokens after the merger: num_patches / merge^2.
  int64_t num_tokens(int64_t merge_size) const {
    return num_patches() / (merge_size * merge_size);
  }
  bool operator==(const ImageGrid& o) const {
    return t == o.t && h == o.h && w == o.w;
  }
};

// transformers' smart_resize: both sides multiples of `factor`, the pixel
// count within [min_pixels, max_pixels], the aspect ratio kept as closely as
// possible (Python's round-half-even, floor and ceil on doubles, as the
// reference). Returns {height, width}. INVALID_ARGUMENT when the aspect
// ratio is above 200 ("absolute aspect ratio must be smaller than 200, got
// 350"), for non-positive sizes, factor or limits, min_pixels > max_pixels.
absl::StatusOr<std::array<int64_t, 2>> SmartResize(int64_t height,
                                                   int64_t width,
                                                   int64_t factor,
                                                   int64_t min_pixels,
                                                   int64_t max_pixels);

// The grid an image of this size gets (SmartResize / patch_size).
absl::StatusOr<ImageGrid> GridForImage(int64_t height, int64_t width,
                                       const ImagePreprocessConfig& config);

// Antialiased bicubic resampling of uint8 RGB (Keys a = -0.5, support
// scaled by the reduction factor), a horizontal pass then a vertical pass
// with 8-bit rounding in between, weights quantised as torch's uint8 kernel
// (and Pillow-SIMD) do. Returns `image` unchanged for the same size.
RgbImage ResizeBicubic(const RgbImage& image, int64_t height, int64_t width);

// The processor's pixel_values for one image: [num_patches][patch_dim]
// floats, patches in merge-block order (block row, block col, row in block,
// col in block), each patch [channel][temporal][py][px] with the frame
// repeated temporal_patch_size times; value = (level - 255 mean) / (255 std)
// in f32. Owns its values.
struct ImagePatches {
  ImageGrid grid;
  int64_t patch_dim = 0;
  std::vector<float> values;
};

// Resize (ResizeBicubic to the GridForImage size), normalise and patchify.
// Errors of GridForImage.
absl::StatusOr<ImagePatches> PreprocessImage(
    const RgbImage& image, const ImagePreprocessConfig& config);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_IMAGE_IMAGE_PREPROCESS_H_
