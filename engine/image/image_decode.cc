#include "engine/image/image_decode.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

// clang-format off
#include <jpeglib.h>  // after <cstdio>: it uses FILE
// clang-format on
#include <png.h>
#include <webp/decode.h>

namespace pdserve {
namespace {

// Neither libpng nor libjpeg can report an error without longjmp; the
// functions that call them keep only trivially destructible locals between
// setjmp and the library calls, and write errors into this buffer.
constexpr size_t kErrorBytes = 200;

struct PngSource {
  const uint8_t* data;
  size_t size;
  size_t offset;
  char error[kErrorBytes];
};

void PngRead(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (src->offset + n > src->size) png_error(png, "truncated PNG data");
  std::memcpy(out, src->data + src->offset, n);
  src->offset += n;
}

void PngError(png_structp png, png_const_charp message) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->error, kErrorBytes, "%s", message);
  png_longjmp(png, 1);
}

void PngWarning(png_structp, png_const_charp) {}

// Decodes into rows (height row pointers of width * channels bytes;
// channels 4 when the probe found alpha or a tRNS chunk, else 3; the caller
// allocates them from the probed size). Returns false with src->error set
// on failure.
bool DecodePngInto(PngSource* src, int64_t width, int64_t height,
                   int channels, png_bytep* rows) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, src,
                                           PngError, PngWarning);
  if (png == nullptr) {
    std::snprintf(src->error, kErrorBytes, "out of memory");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, src, PngRead);
  png_read_info(png, info);
  if (static_cast<int64_t>(png_get_image_width(png, info)) != width ||
      static_cast<int64_t>(png_get_image_height(png, info)) != height) {
    png_error(png, "PNG size changed between reads");
  }
  const int color = png_get_color_type(png, info);
  png_set_strip_16(png);  // PIL keeps the high byte
  png_set_packing(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_expand_gray_1_2_4_to_8(png);
    png_set_gray_to_rgb(png);
  }
  if (channels == 4) {
    png_set_tRNS_to_alpha(png);
    if (!(color & PNG_COLOR_MASK_ALPHA) &&
        !png_get_valid(png, info, PNG_INFO_tRNS)) {
      png_set_add_alpha(png, 0xff, PNG_FILLER_AFTER);
    }
  } else if (color & PNG_COLOR_MASK_ALPHA) {
    png_set_strip_alpha(png);
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) !=
      static_cast<png_size_t>(width * channels)) {
    png_error(png, "unexpected PNG row layout");
  }
  png_read_image(png, rows);
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

// Whether a PNG has an alpha channel or a tRNS chunk (colour type in IHDR;
// a tRNS chunk before the first IDAT).
bool PngHasTransparency(absl::string_view b) {
  if (b.size() > 25 && (static_cast<uint8_t>(b[25]) & 4) != 0) return true;
  for (size_t at = 8; at + 8 <= b.size();) {
    const uint32_t len = (uint32_t{static_cast<uint8_t>(b[at])} << 24) |
                         (uint32_t{static_cast<uint8_t>(b[at + 1])} << 16) |
                         (uint32_t{static_cast<uint8_t>(b[at + 2])} << 8) |
                         uint32_t{static_cast<uint8_t>(b[at + 3])};
    const absl::string_view type = b.substr(at + 4, 4);
    if (type == "tRNS") return true;
    if (type == "IDAT" || type == "IEND") return false;
    if (len > b.size()) return false;
    at += 12 + static_cast<size_t>(len);
  }
  return false;
}

// transformers' convert_to_rgb: an image with transparency is composited
// onto opaque white (PIL's alpha_composite, 7-bit fixed point), then RGB.
void CompositeOnWhite(const uint8_t* rgba, int64_t pixels, uint8_t* rgb) {
  constexpr uint32_t kBits = 7;
  for (int64_t i = 0; i < pixels; ++i) {
    const uint8_t* s = rgba + i * 4;
    uint8_t* d = rgb + i * 3;
    const uint32_t a = s[3];
    if (a == 0) {
      d[0] = d[1] = d[2] = 255;
      continue;
    }
    const uint32_t outa255 = a * 255 + 255 * (255 - a);
    const uint32_t coef1 = a * 255 * 255 * (1u << kBits) / outa255;
    const uint32_t coef2 = 255 * (1u << kBits) - coef1;
    for (int c = 0; c < 3; ++c) {
      const uint32_t t = s[c] * coef1 + 255 * coef2 + (0x80u << kBits);
      d[c] = static_cast<uint8_t>((((t >> 8) + t) >> 8) >> kBits);
    }
  }
}

absl::StatusOr<ImageInfo> ProbePng(absl::string_view b) {
  // Signature (8), IHDR length (4), "IHDR", width, height (big-endian).
  if (b.size() < 24 || b.substr(12, 4) != "IHDR") {
    return absl::InvalidArgumentError(absl::StrCat(
        "PNG image has no IHDR header (", b.size(), " bytes)"));
  }
  auto be32 = [&](size_t at) {
    return (int64_t{static_cast<uint8_t>(b[at])} << 24) |
           (int64_t{static_cast<uint8_t>(b[at + 1])} << 16) |
           (int64_t{static_cast<uint8_t>(b[at + 2])} << 8) |
           int64_t{static_cast<uint8_t>(b[at + 3])};
  };
  return ImageInfo{ImageFormat::kPng, be32(16), be32(20)};
}

struct JpegError {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char error[kErrorBytes];
};

void JpegErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  std::snprintf(err->error, kErrorBytes, "%s", text);
  std::longjmp(err->jump, 1);
}

void JpegSilence(j_common_ptr, int) {}

// PIL's CMYK -> RGB: 255 - k - (255 - k) * c / 255 with its rounding.
uint8_t CmykChannel(int c, int k) {
  const int nk = 255 - k;
  const int t = c * nk + 128;
  const int v = nk - (((t >> 8) + t) >> 8);
  return static_cast<uint8_t>(v < 0 ? 0 : v);
}

// Reads the header (out == nullptr) or the whole image into out (width *
// height * 3 bytes; `row` holds one scanline of width * 4 bytes). Returns
// false with err->error set on failure.
bool DecodeJpeg(const uint8_t* data, size_t size, JpegError* err,
                int64_t* width, int64_t* height, uint8_t* out, uint8_t* row) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = JpegErrorExit;
  err->mgr.emit_message = JpegSilence;
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK ||
                    cinfo.jpeg_color_space == JCS_YCCK;
  const bool adobe_inverted = cmyk && cinfo.saw_Adobe_marker;
  *width = cinfo.image_width;
  *height = cinfo.image_height;
  if (out == nullptr) {
    jpeg_destroy_decompress(&cinfo);
    return true;
  }
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const int64_t w = cinfo.output_width;
  while (cinfo.output_scanline < cinfo.output_height) {
    uint8_t* dst = out + static_cast<int64_t>(cinfo.output_scanline) * w * 3;
    JSAMPROW rowp = cmyk ? row : dst;
    jpeg_read_scanlines(&cinfo, &rowp, 1);
    if (!cmyk) continue;
    for (int64_t x = 0; x < w; ++x) {
      const uint8_t* s = row + x * 4;
      auto ch = [&](int i) { return adobe_inverted ? 255 - s[i] : s[i]; };
      for (int c = 0; c < 3; ++c) dst[x * 3 + c] = CmykChannel(ch(c), ch(3));
    }
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

absl::StatusOr<ImageInfo> ProbeJpeg(absl::string_view b) {
  JpegError err;
  int64_t w = 0, h = 0;
  if (!DecodeJpeg(reinterpret_cast<const uint8_t*>(b.data()), b.size(), &err,
                  &w, &h, nullptr, nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("JPEG image header: ", err.error));
  }
  return ImageInfo{ImageFormat::kJpeg, w, h};
}

absl::StatusOr<ImageInfo> ProbeWebp(absl::string_view b) {
  WebPBitstreamFeatures f;
  if (WebPGetFeatures(reinterpret_cast<const uint8_t*>(b.data()), b.size(),
                      &f) != VP8_STATUS_OK) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WebP image header is corrupt or truncated (", b.size(), " bytes)"));
  }
  if (f.has_animation) {
    return absl::InvalidArgumentError("animated WebP images are not supported");
  }
  return ImageInfo{ImageFormat::kWebp, f.width, f.height};
}

}  // namespace

const char* ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng:
      return "png";
    case ImageFormat::kJpeg:
      return "jpeg";
    case ImageFormat::kWebp:
      return "webp";
  }
  return "?";
}

absl::StatusOr<ImageFormat> SniffImageFormat(absl::string_view b) {
  if (b.size() >= 8 && b.substr(0, 8) == "\x89PNG\r\n\x1a\n") {
    return ImageFormat::kPng;
  }
  if (b.size() >= 3 && b.substr(0, 3) == "\xff\xd8\xff") {
    return ImageFormat::kJpeg;
  }
  if (b.size() >= 12 && b.substr(0, 4) == "RIFF" && b.substr(8, 4) == "WEBP") {
    return ImageFormat::kWebp;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "not a PNG, JPEG or WebP image (", b.size(), " bytes starting with \"",
      absl::CHexEscape(b.substr(0, 8)), "\")"));
}

absl::StatusOr<ImageInfo> ProbeImage(absl::string_view bytes) {
  absl::StatusOr<ImageFormat> format = SniffImageFormat(bytes);
  if (!format.ok()) return format.status();
  absl::StatusOr<ImageInfo> info =
      *format == ImageFormat::kPng    ? ProbePng(bytes)
      : *format == ImageFormat::kJpeg ? ProbeJpeg(bytes)
                                      : ProbeWebp(bytes);
  if (info.ok() && (info->width <= 0 || info->height <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(ImageFormatName(*format), " image is ", info->width,
                     " x ", info->height, " pixels"));
  }
  return info;
}

absl::StatusOr<RgbImage> DecodeImage(absl::string_view bytes,
                                     int64_t max_pixels) {
  absl::StatusOr<ImageInfo> info = ProbeImage(bytes);
  if (!info.ok()) return info.status();
  // Each side is below 2^32, so the product fits.
  const int64_t pixels = info->width * info->height;
  if (pixels > max_pixels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image is ", info->width, " x ", info->height, " = ", pixels,
        " pixels, more than the limit of ", max_pixels));
  }
  RgbImage img;
  img.width = info->width;
  img.height = info->height;
  img.pixels.resize(static_cast<size_t>(pixels * 3));
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (info->format == ImageFormat::kPng) {
    const int channels = PngHasTransparency(bytes) ? 4 : 3;
    std::vector<uint8_t> rgba(channels == 4 ? static_cast<size_t>(pixels * 4)
                                            : 0);
    uint8_t* base = channels == 4 ? rgba.data() : img.pixels.data();
    std::vector<png_bytep> rows(static_cast<size_t>(img.height));
    for (int64_t y = 0; y < img.height; ++y) {
      rows[y] = base + y * img.width * channels;
    }
    PngSource src{data, bytes.size(), 0, {}};
    if (!DecodePngInto(&src, img.width, img.height, channels, rows.data())) {
      return absl::InvalidArgumentError(
          absl::StrCat("PNG image is corrupt: ", src.error));
    }
    if (channels == 4) CompositeOnWhite(rgba.data(), pixels, img.pixels.data());
  } else if (info->format == ImageFormat::kJpeg) {
    std::vector<uint8_t> row(static_cast<size_t>(img.width * 4));
    JpegError err;
    int64_t w = 0, h = 0;
    if (!DecodeJpeg(data, bytes.size(), &err, &w, &h, img.pixels.data(),
                    row.data())) {
      return absl::InvalidArgumentError(
          absl::StrCat("JPEG image is corrupt: ", err.error));
    }
  } else {
    WebPBitstreamFeatures f;
    WebPGetFeatures(data, bytes.size(), &f);
    std::vector<uint8_t> rgba(f.has_alpha ? static_cast<size_t>(pixels * 4)
                                          : 0);
    const bool ok =
        f.has_alpha
            ? WebPDecodeRGBAInto(data, bytes.size(), rgba.data(), rgba.size(),
                                 static_cast<int>(img.width * 4)) != nullptr
            : WebPDecodeRGBInto(data, bytes.size(), img.pixels.data(),
                                img.pixels.size(),
                                static_cast<int>(img.width * 3)) != nullptr;
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "WebP image is corrupt (", bytes.size(), " bytes)"));
    }
    if (f.has_alpha) CompositeOnWhite(rgba.data(), pixels, img.pixels.data());
  }
  return img;
}

}  // namespace pdserve
