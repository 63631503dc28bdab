// Decoding PNG, JPEG and WebP images into 8-bit RGB, as the reference image
// processor sees them (PIL's Image.open, then transformers' convert_to_rgb):
// an image with transparency (an alpha channel or a PNG tRNS chunk) is
// composited onto opaque white with PIL's alpha_composite arithmetic, grey
// is replicated, palettes are expanded, 16-bit samples keep their high byte
// (PIL keeps 16-bit grey as integers instead: such images differ), JPEG
// uses libjpeg's default decode (ISLOW, fancy upsampling), CMYK JPEGs are
// converted with PIL's formula. EXIF orientation is not applied (neither
// does the processor). Uses Debian's libpng, libjpeg(-turbo) and libwebp.
// Pure functions of their inputs; thread-safe.
#ifndef PDSERVE_ENGINE_IMAGE_IMAGE_DECODE_H_
#define PDSERVE_ENGINE_IMAGE_IMAGE_DECODE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pdserve {

enum class ImageFormat { kPng, kJpeg, kWebp };

// "png", "jpeg", "webp".
const char* ImageFormatName(ImageFormat format);

// An 8-bit RGB image: pixels[(y * width + x) * 3 + c], c = R, G, B. Owns its
// pixels; a plain value type.
struct RgbImage {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;

  int64_t num_pixels() const { return width * height; }
};

// What the header says, read without decoding the pixels.
struct ImageInfo {
  ImageFormat format = ImageFormat::kPng;
  int64_t width = 0;
  int64_t height = 0;
};

// The format from the first bytes (PNG signature, JPEG SOI, RIFF....WEBP);
// INVALID_ARGUMENT naming the first bytes when none matches.
absl::StatusOr<ImageFormat> SniffImageFormat(absl::string_view bytes);

// Reads the header only. INVALID_ARGUMENT for an unknown format, a truncated
// or corrupt header, or a zero width or height.
absl::StatusOr<ImageInfo> ProbeImage(absl::string_view bytes);

// Decodes the whole image. INVALID_ARGUMENT for what ProbeImage refuses, an
// image of more than max_pixels pixels (checked from the header before any
// pixel is decoded: "image is 20000 x 20000 = 400000000 pixels, more than
// the limit of ..."), an animated WebP, or corrupt data (the library's
// message).
absl::StatusOr<RgbImage> DecodeImage(absl::string_view bytes,
                                     int64_t max_pixels);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_IMAGE_IMAGE_DECODE_H_
