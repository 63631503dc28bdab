// Element-wise and row-wise f32 operations. Numerics follow Hugging Face
// transformers' fp32 paths (operation order and f32 rounding at each step);
// Dot, Axpy, SwiGlu and Softmax use the SIMD level MatMul selected (their
// vector exp is within ~2 ulp of expf).
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/matmul_internal.h"

namespace pdserve {

void RmsNorm(const float* x, const float* weight, float eps, int64_t n,
             float* out) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    sum_sq += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  }
  const float variance = static_cast<float>(sum_sq / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(variance + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * scale);
}

namespace {

// inv_freq_i = 1 / theta^(2i / rot_dims), all in f32 as transformers does.
inline float InvFreq(float theta, int i, int rot_dims) {
  const float exponent =
      static_cast<float>(2 * i) / static_cast<float>(rot_dims);
  return 1.0f / std::pow(theta, exponent);
}

}  // namespace

void ApplyRope(float* x, int n_heads, int head_dim, int rot_dims, double pos,
               float theta, RopeStyle style) {
  const int half = rot_dims / 2;
  const float p = static_cast<float>(pos);
  for (int i = 0; i < half; ++i) {
    const float angle = p * InvFreq(theta, i, rot_dims);
    const float c = std::cos(angle);
    const float s = std::sin(angle);
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + static_cast<int64_t>(h) * head_dim;
      const int a = style == RopeStyle::kNeox ? i : 2 * i;
      const int b = style == RopeStyle::kNeox ? i + half : 2 * i + 1;
      const float x0 = v[a];
      const float x1 = v[b];
      // q * cos + rotate_half(q) * sin, each product rounded to f32.
      const float p0 = x0 * c;
      const float p1 = -x1 * s;
      const float p2 = x1 * c;
      const float p3 = x0 * s;
      v[a] = p0 + p1;
      v[b] = p2 + p3;
    }
  }
}

namespace kernels_internal {

void SwiGluScalar(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void GeluTanhScalar(const float* x, int64_t n, float* out) {
  constexpr float kTwoC = 2.0f * 0.7978845608028654f;  // 2 sqrt(2 / pi)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kTwoC * (v + 0.044715f * v * v * v);
    out[i] = v / (1.0f + std::exp(-u));
  }
}

void SoftmaxScalar(float* x, int64_t n) {
  if (n <= 0) return;
  float max = x[0];
  for (int64_t i = 1; i < n; ++i) max = std::max(max, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

float LogSumExpScalar(const float* x, int64_t n) {
  if (n <= 0) return -std::numeric_limits<float>::infinity();
  float max = x[0];
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return x[i];
    max = std::max(max, x[i]);
  }
  if (std::isinf(max)) return max;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - max);
  return LogSumExpFinish(max, sum);
}

int64_t ArgMaxScalar(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

}  // namespace kernels_internal

int64_t ArgMax(const float* x, int64_t n) {
  return kernels_internal::ActiveKernels().arg_max(x, n);
}

float LogSumExp(const float* x, int64_t n) {
  return kernels_internal::ActiveKernels().log_sum_exp(x, n);
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  kernels_internal::ActiveKernels().swiglu(gate, up, n, out);
}

void GeluTanh(const float* x, int64_t n, float* out) {
  kernels_internal::ActiveKernels().gelu_tanh(x, n, out);
}

void Softmax(float* x, int64_t n) {
  kernels_internal::ActiveKernels().softmax(x, n);
}

void AddInPlace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

float Dot(const float* a, const float* b, int64_t n) {
  return kernels_internal::ActiveKernels().dot(a, b, n);
}

void Axpy(float a, const float* x, float* y, int64_t n) {
  kernels_internal::ActiveKernels().axpy(a, x, y, n);
}

}  // namespace pdserve
