#include "engine/model/vision_encoder.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/dtype.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace pdserve {
namespace {

// Query rows per block of the attention scores ([rows][frame patches]).
constexpr int64_t kQueryBlock = 1024;

float GeluErf(float x) {
  return 0.5f * x * (1.0f + std::erf(x * 0.7071067811865476f));
}

// src [rows][cols] rounded to bf16 into `bf`, packed for the active kernels
// into `packed` (64-byte aligned inside it) when they pack bf16.
WeightView PackedBf16View(const float* src, int64_t rows, int64_t cols,
                          std::vector<uint16_t>& bf,
                          std::vector<uint8_t>& packed) {
  bf.resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) bf[i] = F32ToBF16(src[i]);
  WeightView v;
  v.type = DType::kBF16;
  v.rows = rows;
  v.cols = cols;
  v.row_bytes = cols * 2;
  v.data = bf.data();
  const int64_t bytes = PackedWeightBytes(v);
  if (bytes == 0) return v;
  packed.resize(static_cast<size_t>(bytes + 64));
  const auto addr = reinterpret_cast<uintptr_t>(packed.data());
  return PackWeights(v, packed.data() + ((64 - addr % 64) % 64));
}

WeightView F32View(const float* data, int64_t rows, int64_t cols) {
  WeightView v;
  v.type = DType::kF32;
  v.rows = rows;
  v.cols = cols;
  v.row_bytes = cols * static_cast<int64_t>(sizeof(float));
  v.data = data;
  return v;
}

// The two taps and weights along one axis of align_corners bilinear
// resampling from `side` to `size` points, in f32 as transformers does.
void Taps(int64_t index, int64_t size, int64_t side, int64_t tap[2],
          float weight[2]) {
  const float src = static_cast<float>(index) * static_cast<float>(side - 1) /
                    static_cast<float>(std::max<int64_t>(size - 1, 1));
  const float fl = std::floor(src);
  for (int k = 0; k < 2; ++k) {
    tap[k] = std::clamp<int64_t>(static_cast<int64_t>(fl) + k, 0, side - 1);
    weight[k] = std::max(0.0f, 1.0f - std::fabs(src - fl - k));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<VisionEncoder>> VisionEncoder::Create(
    const ModelWeights& weights, ThreadPool& pool) {
  const VisionConfig& c = weights.config.vision;
  if (!c.present() ||
      static_cast<int64_t>(weights.vision.blocks.size()) != c.depth ||
      weights.vision.patch_embed.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", weights.config.name, " has no vision tower (",
        weights.vision.blocks.size(), " blocks loaded, config depth ",
        c.depth, ")"));
  }
  return std::unique_ptr<VisionEncoder>(new VisionEncoder(weights, pool));
}

VisionEncoder::VisionEncoder(const ModelWeights& weights, ThreadPool& pool)
    : c_(weights.config.vision), w_(weights.vision), pool_(pool) {
  const DType t = w_.blocks.empty() ? DType::kF32 : w_.blocks[0].qkv.type;
  attend_in_bf16_ = t == DType::kBF16 || t == DType::kF16;
}

int64_t VisionEncoder::OutputRows(const ImageGrid& grid) const {
  return grid.num_tokens(c_.merge_size());
}

absl::Status VisionEncoder::Validate(const ImagePatches& image,
                                     size_t out_size) const {
  const ImageGrid& g = image.grid;
  const int64_t m = c_.merge_size();
  if (g.t < 1 || g.h < 1 || g.w < 1 || g.h % m != 0 || g.w % m != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image grid ", g.t, " x ", g.h, " x ", g.w,
        " patches: each side must be a positive multiple of the merge size ",
        m));
  }
  if (image.patch_dim != c_.patch_dim() ||
      static_cast<int64_t>(image.values.size()) !=
          g.num_patches() * c_.patch_dim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image has ", image.values.size(), " values in patches of ",
        image.patch_dim, "; the vision tower takes ", g.num_patches(),
        " patches of ", c_.patch_dim()));
  }
  const int64_t need = OutputRows(g) * c_.out_hidden_size;
  if (static_cast<int64_t>(out_size) < need) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image embedding buffer holds ", out_size, " floats, need ", need,
        " (", OutputRows(g), " tokens of ", c_.out_hidden_size, ")"));
  }
  return absl::OkStatus();
}

absl::Status VisionEncoder::Encode(const ImagePatches& image,
                                   absl::Span<float> out) {
  if (absl::Status s = Validate(image, out.size()); !s.ok()) return s;
  n_ = image.grid.num_patches();
  const int64_t h = c_.hidden_size;
  x_.resize(n_ * h);
  xn_.resize(n_ * h);
  qkv_.resize(n_ * 3 * h);
  attn_.resize(n_ * h);
  mid_.resize(n_ * std::max(c_.intermediate_size, h * c_.merge_size() *
                                                      c_.merge_size()));
  tmp_.resize(n_ * h);
  Embed(image);
  PrepareRotary(image.grid);
  for (const VisionBlockWeights& b : w_.blocks) Block(b, image.grid);
  Merge(OutputRows(image.grid), out.data());
  return absl::OkStatus();
}

void VisionEncoder::Linear(const WeightView& w, const float* bias,
                           const float* x, int64_t rows, float* y) {
  MatMul(w, x, w.cols, rows, y, w.rows, pool_);
  pool_.ParallelFor(rows, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* yr = y + r * w.rows;
      for (int64_t o = 0; o < w.rows; ++o) yr[o] += bias[o];
    }
  });
}

void VisionEncoder::LayerNormRows(const float* x, const float* w,
                                  const float* b, int64_t rows, float* out) {
  const int64_t h = c_.hidden_size;
  const double eps = c_.layer_norm_eps;
  pool_.ParallelFor(rows, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* xr = x + r * h;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < h; ++i) mean += xr[i];
      mean /= h;
      for (int64_t i = 0; i < h; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      const double inv = 1.0 / std::sqrt(var / h + eps);
      float* o = out + r * h;
      for (int64_t i = 0; i < h; ++i) {
        o[i] = static_cast<float>((xr[i] - mean) * inv) * w[i] + b[i];
      }
    }
  });
}

void VisionEncoder::Embed(const ImagePatches& image) {
  const int64_t h = c_.hidden_size, side = c_.grid_side();
  const int64_t m = c_.merge_size();
  const ImageGrid& g = image.grid;
  Linear(w_.patch_embed, w_.patch_bias, image.values.data(), n_, x_.data());
  // Patch i of a frame, in merge-block order, sits at (row, col).
  pool_.ParallelFor(n_, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t within = i % (g.h * g.w);
      const int64_t block = within / (m * m), in_block = within % (m * m);
      const int64_t row = (block / (g.w / m)) * m + in_block / m;
      const int64_t col = (block % (g.w / m)) * m + in_block % m;
      int64_t th[2], tw[2];
      float wh[2], ww[2];
      Taps(row, g.h, side, th, wh);
      Taps(col, g.w, side, tw, ww);
      float* xr = x_.data() + i * h;
      for (int64_t d = 0; d < h; ++d) {
        float sum = 0.0f;
        for (int a = 0; a < 2; ++a) {
          for (int b = 0; b < 2; ++b) {
            sum += w_.pos_embed[(th[a] * side + tw[b]) * h + d] *
                   (wh[a] * ww[b]);
          }
        }
        xr[d] += sum;
      }
    }
  });
}

void VisionEncoder::PrepareRotary(const ImageGrid& g) {
  const int64_t hd = c_.head_dim(), half = hd / 2, quarter = hd / 4;
  const int64_t m = c_.merge_size();
  std::vector<float> inv_freq(quarter);
  for (int64_t j = 0; j < quarter; ++j) {
    const float exponent =
        static_cast<float>(2 * j) / static_cast<float>(half);
    inv_freq[j] = 1.0f / std::pow(c_.rope_theta, exponent);
  }
  cos_.resize(n_ * half);
  sin_.resize(n_ * half);
  for (int64_t i = 0; i < n_; ++i) {
    const int64_t within = i % (g.h * g.w);
    const int64_t block = within / (m * m), in_block = within % (m * m);
    const float row = static_cast<float>((block / (g.w / m)) * m + in_block / m);
    const float col = static_cast<float>((block % (g.w / m)) * m + in_block % m);
    for (int64_t j = 0; j < half; ++j) {
      const float angle =
          j < quarter ? row * inv_freq[j] : col * inv_freq[j - quarter];
      cos_[i * half + j] = std::cos(angle);
      sin_[i * half + j] = std::sin(angle);
    }
  }
}

void VisionEncoder::Block(const VisionBlockWeights& b, const ImageGrid& g) {
  const int64_t h = c_.hidden_size, hd = c_.head_dim(), half = hd / 2;
  LayerNormRows(x_.data(), b.ln1_w, b.ln1_b, n_, xn_.data());
  Linear(b.qkv, b.qkv_b, xn_.data(), n_, qkv_.data());
  // Rotate q and k of every head.
  pool_.ParallelFor(n_, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* cs = cos_.data() + r * half;
      const float* sn = sin_.data() + r * half;
      for (int64_t part = 0; part < 2; ++part) {  // q, k
        float* head0 = qkv_.data() + r * 3 * h + part * h;
        for (int64_t head = 0; head < c_.num_heads; ++head) {
          float* v = head0 + head * hd;
          for (int64_t j = 0; j < half; ++j) {
            const float x0 = v[j], x1 = v[j + half];
            v[j] = x0 * cs[j] - x1 * sn[j];
            v[j + half] = x1 * cs[j] + x0 * sn[j];
          }
        }
      }
    }
  });
  Attention(g);
  Linear(b.proj, b.proj_b, attn_.data(), n_, tmp_.data());
  for (int64_t i = 0; i < n_ * h; ++i) x_[i] += tmp_[i];
  LayerNormRows(x_.data(), b.ln2_w, b.ln2_b, n_, xn_.data());
  const int64_t inter = c_.intermediate_size;
  Linear(b.fc1, b.fc1_b, xn_.data(), n_, mid_.data());
  pool_.ParallelFor(n_, 16, [&](int64_t lo, int64_t hi) {
    float* m = mid_.data() + lo * inter;
    if (c_.gelu_tanh) {
      GeluTanh(m, (hi - lo) * inter, m);
      return;
    }
    for (int64_t i = 0; i < (hi - lo) * inter; ++i) m[i] = GeluErf(m[i]);
  });
  Linear(b.fc2, b.fc2_b, mid_.data(), n_, tmp_.data());
  for (int64_t i = 0; i < n_ * h; ++i) x_[i] += tmp_[i];
}

void VisionEncoder::Attention(const ImageGrid& g) {
  const int64_t frame = g.h * g.w;
  for (int64_t f = 0; f < g.t; ++f) {
    for (int64_t head = 0; head < c_.num_heads; ++head) {
      AttendHead(f * frame, frame, head);
    }
  }
}

// Full attention of one head over rows [row0, row0 + len): scores = q k^T
// by query blocks, softmax, times v; both products through MatMul.
void VisionEncoder::AttendHead(int64_t row0, int64_t len, int64_t head) {
  const int64_t h = c_.hidden_size, hd = c_.head_dim();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  k_.resize(len * hd);
  vt_.resize(hd * len);
  for (int64_t r = 0; r < len; ++r) {
    const float* src = qkv_.data() + (row0 + r) * 3 * h + head * hd;
    std::copy(src + h, src + h + hd, k_.data() + r * hd);
    for (int64_t d = 0; d < hd; ++d) vt_[d * len + r] = src[2 * h + d];
  }
  const WeightView keys =
      attend_in_bf16_ ? PackedBf16View(k_.data(), len, hd, k16_, k_packed_)
                      : F32View(k_.data(), len, hd);
  const WeightView values_t =
      attend_in_bf16_
          ? PackedBf16View(vt_.data(), hd, len, vt16_, vt_packed_)
          : F32View(vt_.data(), hd, len);
  const int64_t block = std::min(kQueryBlock, len);
  q_.resize(block * hd);
  scores_.resize(block * len);
  o_.resize(block * hd);
  for (int64_t q0 = 0; q0 < len; q0 += block) {
    const int64_t rows = std::min(block, len - q0);
    for (int64_t r = 0; r < rows; ++r) {
      const float* src = qkv_.data() + (row0 + q0 + r) * 3 * h + head * hd;
      float* q = q_.data() + r * hd;
      for (int64_t d = 0; d < hd; ++d) q[d] = src[d] * scale;
    }
    MatMul(keys, q_.data(), hd, rows, scores_.data(), len, pool_);
    pool_.ParallelFor(rows, 4, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) Softmax(scores_.data() + r * len, len);
    });
    MatMul(values_t, scores_.data(), len, rows, o_.data(), hd, pool_);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy(o_.data() + r * hd, o_.data() + (r + 1) * hd,
                attn_.data() + (row0 + q0 + r) * h + head * hd);
    }
  }
}

void VisionEncoder::Merge(int64_t rows, float* out) {
  LayerNormRows(x_.data(), w_.merger_norm_w, w_.merger_norm_b, n_,
                xn_.data());
  // xn_ as [rows][merge^2 * hidden]: consecutive patches of a block.
  const int64_t merged = w_.merger_fc1.rows;
  Linear(w_.merger_fc1, w_.merger_fc1_b, xn_.data(), rows, mid_.data());
  pool_.ParallelFor(rows, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo * merged; i < hi * merged; ++i) {
      mid_[i] = GeluErf(mid_[i]);
    }
  });
  Linear(w_.merger_fc2, w_.merger_fc2_b, mid_.data(), rows, out);
}

}  // namespace pdserve
