#include "engine/image/image_preprocess.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace pdserve {
namespace {

// Keys' cubic with a = -0.5, the antialiasing kernel of PIL and torch.
double BicubicAa(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// The taps of one output position along an axis and their weights in
// fixed point (int16, `precision` fractional bits).
struct AxisTaps {
  std::vector<int64_t> first;   // [out] first input index
  std::vector<int64_t> count;   // [out] taps used
  int64_t stride = 0;           // weights per output position
  std::vector<int32_t> weight;  // [out][stride]
  int precision = 0;
};

// torch's _compute_indices_min_size_weights_aa (double) followed by its
// int16 quantisation (_compute_index_ranges_int16_weights).
AxisTaps ComputeTaps(int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  AxisTaps t;
  t.stride = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(out);
  t.count.resize(out);
  std::vector<double> w(static_cast<size_t>(out * t.stride), 0.0);
  double wt_max = 0.0;
  for (int64_t i = 0; i < out; ++i) {
    const double center = scale * (static_cast<double>(i) + 0.5);
    const int64_t xmin =
        std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    int64_t xsize =
        std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in) -
        xmin;
    xsize = std::clamp<int64_t>(xsize, 0, t.stride);
    double* row = w.data() + i * t.stride;
    double total = 0.0;
    for (int64_t j = 0; j < xsize; ++j) {
      row[j] = BicubicAa((static_cast<double>(j + xmin) - center + 0.5) *
                         invscale);
      total += row[j];
    }
    if (total != 0.0) {
      for (int64_t j = 0; j < xsize; ++j) {
        row[j] /= total;
        wt_max = std::max(wt_max, row[j]);
      }
    }
    t.first[i] = xmin;
    t.count[i] = xsize;
  }
  for (t.precision = 0; t.precision < 22; ++t.precision) {
    const int next =
        static_cast<int>(0.5 + wt_max * (1 << (t.precision + 1)));
    if (next >= (1 << 15)) break;
  }
  t.weight.resize(w.size());
  const double one = static_cast<double>(1 << t.precision);
  for (size_t k = 0; k < w.size(); ++k) {
    const double v = w[k] * one;
    t.weight[k] = v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v);
  }
  return t;
}

uint8_t Clip8(int64_t sum, int precision) {
  const int64_t v = sum >> precision;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// One pass along x (horizontal) or y, uint8 in and out.
RgbImage ResamplePass(const RgbImage& in, int64_t new_size, bool horizontal) {
  const int64_t in_size = horizontal ? in.width : in.height;
  const AxisTaps taps = ComputeTaps(in_size, new_size);
  RgbImage out;
  out.width = horizontal ? new_size : in.width;
  out.height = horizontal ? in.height : new_size;
  out.pixels.resize(static_cast<size_t>(out.width * out.height * 3));
  const int64_t round = int64_t{1} << (taps.precision > 0 ? taps.precision - 1
                                                          : 0);
  for (int64_t y = 0; y < out.height; ++y) {
    for (int64_t x = 0; x < out.width; ++x) {
      const int64_t o = horizontal ? x : y;
      const int32_t* w = taps.weight.data() + o * taps.stride;
      for (int c = 0; c < 3; ++c) {
        int64_t sum = taps.precision > 0 ? round : 0;
        for (int64_t j = 0; j < taps.count[o]; ++j) {
          const int64_t src = taps.first[o] + j;
          const int64_t at = horizontal ? (y * in.width + src) * 3 + c
                                        : (src * in.width + x) * 3 + c;
          sum += static_cast<int64_t>(in.pixels[at]) * w[j];
        }
        out.pixels[(y * out.width + x) * 3 + c] = Clip8(sum, taps.precision);
      }
    }
  }
  return out;
}

// Python's round() of a double: half to even.
int64_t RoundHalfEven(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

}  // namespace

absl::StatusOr<std::array<int64_t, 2>> SmartResize(int64_t height,
                                                   int64_t width,
                                                   int64_t factor,
                                                   int64_t min_pixels,
                                                   int64_t max_pixels) {
  if (height <= 0 || width <= 0 || factor <= 0 || min_pixels <= 0 ||
      max_pixels < min_pixels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot resize a ", width, " x ", height, " image to multiples of ",
        factor, " with ", min_pixels, " to ", max_pixels, " pixels"));
  }
  const double h = static_cast<double>(height);
  const double w = static_cast<double>(width);
  const double ratio = std::max(h, w) / std::min(h, w);
  if (ratio > 200) {
    return absl::InvalidArgumentError(absl::StrCat(
        "absolute aspect ratio must be smaller than 200, got ", ratio, " (",
        width, " x ", height, " pixels)"));
  }
  const double f = static_cast<double>(factor);
  int64_t h_bar = RoundHalfEven(h / f) * factor;
  int64_t w_bar = RoundHalfEven(w / f) * factor;
  const double area = h * w;
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(area / static_cast<double>(max_pixels));
    h_bar = std::max<int64_t>(
        factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max<int64_t>(
        factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / area);
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return std::array<int64_t, 2>{h_bar, w_bar};
}

absl::StatusOr<ImageGrid> GridForImage(int64_t height, int64_t width,
                                       const ImagePreprocessConfig& config) {
  absl::StatusOr<std::array<int64_t, 2>> size =
      SmartResize(height, width, config.factor(), config.min_pixels,
                  config.max_pixels);
  if (!size.ok()) return size.status();
  return ImageGrid{1, (*size)[0] / config.patch_size,
                   (*size)[1] / config.patch_size};
}

RgbImage ResizeBicubic(const RgbImage& image, int64_t height, int64_t width) {
  RgbImage out = image;
  if (width != out.width) out = ResamplePass(out, width, /*horizontal=*/true);
  if (height != out.height) {
    out = ResamplePass(out, height, /*horizontal=*/false);
  }
  return out;
}

absl::StatusOr<ImagePatches> PreprocessImage(
    const RgbImage& image, const ImagePreprocessConfig& config) {
  absl::StatusOr<ImageGrid> grid =
      GridForImage(image.height, image.width, config);
  if (!grid.ok()) return grid.status();
  const int64_t p = config.patch_size, m = config.merge_size;
  const int64_t tp = config.temporal_patch_size;
  const RgbImage resized = ResizeBicubic(image, grid->h * p, grid->w * p);
  ImagePatches out;
  out.grid = *grid;
  out.patch_dim = config.patch_dim();
  out.values.resize(static_cast<size_t>(grid->num_patches() * out.patch_dim));
  float mean[3], stdev[3];
  for (int c = 0; c < 3; ++c) {
    mean[c] = config.mean[c] * 255.0f;
    stdev[c] = config.std[c] * 255.0f;
  }
  int64_t patch = 0;
  for (int64_t bh = 0; bh < grid->h / m; ++bh) {
    for (int64_t bw = 0; bw < grid->w / m; ++bw) {
      for (int64_t ih = 0; ih < m; ++ih) {
        for (int64_t iw = 0; iw < m; ++iw, ++patch) {
          const int64_t y0 = (bh * m + ih) * p, x0 = (bw * m + iw) * p;
          float* dst = out.values.data() + patch * out.patch_dim;
          for (int c = 0; c < 3; ++c) {
            for (int64_t t = 0; t < tp; ++t) {
              for (int64_t py = 0; py < p; ++py) {
                for (int64_t px = 0; px < p; ++px) {
                  const float level = resized.pixels[
                      ((y0 + py) * resized.width + x0 + px) * 3 + c];
                  *dst++ = (level - mean[c]) / stdev[c];
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace pdserve
