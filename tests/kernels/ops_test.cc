#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/matmul_internal.h"

namespace pdserve {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Naive double RoPE. With `f32_angle`, the angle is formed in f32 exactly as
// transformers does (inv_freq and pos * inv_freq rounded to f32) and only the
// rotation is done in double.
void NaiveRope(std::vector<double>& x, int n_heads, int head_dim, int rot_dims,
               double pos, double theta, bool neox, bool f32_angle) {
  const int half = rot_dims / 2;
  for (int h = 0; h < n_heads; ++h) {
    for (int i = 0; i < half; ++i) {
      double angle;
      if (f32_angle) {
        const float e =
            static_cast<float>(2 * i) / static_cast<float>(rot_dims);
        const float inv = 1.0f / std::pow(static_cast<float>(theta), e);
        angle = static_cast<float>(pos) * inv;
      } else {
        angle = pos * std::pow(theta, -2.0 * i / rot_dims);
      }
      const int a = neox ? i : 2 * i;
      const int b = neox ? i + half : 2 * i + 1;
      const double x0 = x[h * head_dim + a], x1 = x[h * head_dim + b];
      x[h * head_dim + a] = x0 * std::cos(angle) - x1 * std::sin(angle);
      x[h * head_dim + b] = x1 * std::cos(angle) + x0 * std::sin(angle);
    }
  }
}

TEST(OpsTest, RopeMatchesNaiveDoubleBothStyles) {
  const int n_heads = 3, head_dim = 64;
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNeox}) {
    for (int rot_dims : {64, 32}) {
      for (double pos : {0.0, 1.0, 17.0, 511.0, 8191.0}) {
        for (float theta : {10000.0f, 1000000.0f}) {
          const bool neox = style == RopeStyle::kNeox;
          std::vector<float> x = Random(n_heads * head_dim, 7);
          std::vector<double> want(x.begin(), x.end());
          std::vector<double> exact(x.begin(), x.end());
          NaiveRope(want, n_heads, head_dim, rot_dims, pos, theta, neox, true);
          NaiveRope(exact, n_heads, head_dim, rot_dims, pos, theta, neox,
                    false);
          const std::vector<float> orig = x;
          ApplyRope(x.data(), n_heads, head_dim, rot_dims, pos, theta, style);
          for (int i = 0; i < n_heads * head_dim; ++i) {
            SCOPED_TRACE("neox=" + std::to_string(neox) +
                         " rot=" + std::to_string(rot_dims) + " pos=" +
                         std::to_string(pos) + " i=" + std::to_string(i));
            // Same f32 angle: only f32 rounding of cos/sin and products.
            ASSERT_NEAR(x[i], want[i], 2e-6);
            // Against exact double angles: the f32 angle error grows with pos.
            ASSERT_NEAR(x[i], exact[i], 2e-6 + 4.0 * pos * 0x1p-24);
            if (i % head_dim >= rot_dims) {
              ASSERT_EQ(x[i], orig[i]);
            }
          }
        }
      }
    }
  }
}

TEST(OpsTest, RmsNormMatchesDouble) {
  for (int64_t n : {1, 7, 64, 576}) {
    std::vector<float> x = Random(n, 1, 3.0f), w = Random(n, 2);
    std::vector<float> out(n);
    RmsNorm(x.data(), w.data(), 1e-5f, n, out.data());
    double ss = 0;
    for (float v : x) ss += double{v} * v;
    const double s = 1.0 / std::sqrt(ss / n + 1e-5);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(out[i], x[i] * s * w[i],
                  1e-6 * std::fabs(x[i] * s * w[i]) + 1e-7);
    }
    RmsNorm(x.data(), w.data(), 1e-5f, n, x.data());  // in place
    EXPECT_EQ(x, out);
  }
}

TEST(OpsTest, SwiGluSoftmaxAdd) {
  const int64_t n = 100;
  std::vector<float> g = Random(n, 3, 4.0f), u = Random(n, 4), out(n);
  SwiGlu(g.data(), u.data(), n, out.data());
  for (int64_t i = 0; i < n; ++i) {
    const double want = g[i] / (1.0 + std::exp(-double{g[i]})) * u[i];
    ASSERT_NEAR(out[i], want, 1e-6 * std::fabs(want) + 1e-7);
  }
  std::vector<float> s = Random(n, 5, 10.0f);
  s[3] = 1000.0f;  // must not overflow
  std::vector<float> orig = s;
  Softmax(s.data(), n);
  double max = orig[0], sum = 0;
  for (float v : orig) max = std::max(max, double{v});
  for (float v : orig) sum += std::exp(v - max);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(s[i], std::exp(orig[i] - max) / sum, 1e-6);
  }
  std::vector<float> y = Random(n, 6), x = Random(n, 7), y0 = y;
  AddInPlace(y.data(), x.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], y0[i] + x[i]);
}

TEST(OpsTest, SwiGluAndSoftmaxEveryLevel) {
  for (const auto* k : kernels_internal::SupportedKernels()) {
    for (int64_t n : {1, 7, 16, 17, 100, 1536}) {
      SCOPED_TRACE(std::string(k->name) + " n=" + std::to_string(n));
      std::vector<float> g = Random(n, 10, 5.0f), u = Random(n, 11);
      g[0] = -100.0f;  // exp(100) saturates: silu -> -0
      if (n > 1) g[1] = 90.0f;
      std::vector<float> out(n);
      k->swiglu(g.data(), u.data(), n, out.data());
      for (int64_t i = 0; i < n; ++i) {
        const double want = g[i] / (1.0 + std::exp(-double{g[i]})) * u[i];
        ASSERT_NEAR(out[i], want, 5e-7 * std::fabs(want) + 1e-30) << "i=" << i;
      }
      // Each element's value does not depend on where it sits in the array.
      if (n > 3) {
        std::vector<float> shifted(n - 3);
        k->swiglu(g.data() + 3, u.data() + 3, n - 3, shifted.data());
        for (int64_t i = 0; i + 3 < n; ++i) ASSERT_EQ(shifted[i], out[i + 3]);
      }
      std::vector<float> s = Random(n, 12, 8.0f), orig = s;
      k->softmax(s.data(), n);
      double max = orig[0], sum = 0;
      for (float v : orig) max = std::max(max, double{v});
      for (float v : orig) sum += std::exp(v - max);
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::exp(orig[i] - max) / sum;
        ASSERT_NEAR(s[i], want, 2e-6 * want + 1e-9) << "i=" << i;
      }
    }
  }
}

// torch's gelu(approximate='tanh') in double, as torch writes it (1 + tanh
// cancels for x below about -5: absolute accuracy only there) ...
double GeluTanhReference(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

// ... and the same function without the cancellation, x * sigmoid(2u).
double GeluTanhStable(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return x / (1.0 + std::exp(-2.0 * c * (x + 0.044715 * x * x * x)));
}

TEST(OpsTest, GeluTanhEveryLevelIsTorchsTanhGelu) {
  for (const auto* k : kernels_internal::SupportedKernels()) {
    for (int64_t n : {1, 7, 8, 16, 17, 100, 4096}) {
      SCOPED_TRACE(std::string(k->name) + " n=" + std::to_string(n));
      std::vector<float> x = Random(n, 21, 6.0f);
      x[0] = -100.0f;  // exp saturates: -> -0 within 1e-30
      if (n > 1) x[1] = 100.0f;
      if (n > 2) x[2] = 0.0f;
      if (n > 3) x[3] = -1e-20f;
      std::vector<float> out(n);
      k->gelu_tanh(x.data(), n, out.data());
      for (int64_t i = 0; i < n; ++i) {
        const double want = GeluTanhStable(x[i]);
        // The float argument -2u carries a few roundings (~5 half-ulps of
        // |2u|): exp turns them into the tail's relative error.
        const double two_u = 2.0 * std::sqrt(2.0 / M_PI) *
                             std::fabs(x[i] + 0.044715 * x[i] * x[i] * x[i]);
        const double tol = (1e-6 + 3e-7 * two_u) * std::fabs(want);
        ASSERT_NEAR(out[i], want, tol + 1e-30) << "i=" << i << " x=" << x[i];
        ASSERT_NEAR(out[i], GeluTanhReference(x[i]), tol + 1e-12)
            << "i=" << i << " x=" << x[i];
      }
      if (n > 3) {  // an element's value does not depend on its place
        std::vector<float> shifted(n - 3);
        k->gelu_tanh(x.data() + 3, n - 3, shifted.data());
        for (int64_t i = 0; i + 3 < n; ++i) ASSERT_EQ(shifted[i], out[i + 3]);
      }
      std::vector<float> in_place = x;  // out may equal x
      k->gelu_tanh(in_place.data(), n, in_place.data());
      ASSERT_EQ(in_place, out);
    }
  }
  std::vector<float> x = {-3.0f, -0.5f, 0.25f, 2.0f}, out(4);
  GeluTanh(x.data(), 4, out.data());  // the dispatching entry point
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(out[i], GeluTanhReference(x[i]), 1e-6);
  }
}

// log(sum exp x) in double, shifted by the max.
double NaiveLogSumExp(const std::vector<float>& x) {
  double max = -INFINITY;
  for (float v : x) max = std::max(max, static_cast<double>(v));
  double sum = 0.0;
  for (float v : x) sum += std::exp(static_cast<double>(v) - max);
  return max + std::log(sum);
}

TEST(OpsTest, LogSumExpEveryLevel) {
  for (const auto* k : kernels_internal::SupportedKernels()) {
    SCOPED_TRACE(k->name);
    // Lengths with every SIMD tail, a vocabulary (49152) and 2^17; scales
    // from flat to peaked logits, offsets far from zero.
    for (int64_t n : {1, 2, 7, 15, 16, 17, 33, 1000, 49152, 131072}) {
      for (float scale : {0.01f, 1.0f, 8.0f, 30.0f}) {
        for (float offset : {0.0f, -40.0f, 55.5f}) {
          std::vector<float> x = Random(n, static_cast<uint32_t>(n) + 3, scale);
          for (float& v : x) v += offset;
          const double want = NaiveLogSumExp(x);
          const float got = k->log_sum_exp(x.data(), n);
          ASSERT_NEAR(got, want, 1e-6 * (1.0 + std::fabs(want)))
              << "n=" << n << " scale=" << scale << " offset=" << offset;
        }
      }
    }
    const float inf = INFINITY;
    std::vector<float> x = {1.0f, -inf, 2.0f, -inf};
    EXPECT_NEAR(k->log_sum_exp(x.data(), 4),
                std::log(std::exp(1.0) + std::exp(2.0)), 1e-6);
    x = {-inf, -inf, -inf};
    EXPECT_EQ(k->log_sum_exp(x.data(), 3), -inf);
    x = {0.0f, inf, 1.0f};
    EXPECT_EQ(k->log_sum_exp(x.data(), 3), inf);
    x = {0.0f, 1.0f, NAN, 2.0f};
    EXPECT_TRUE(std::isnan(k->log_sum_exp(x.data(), 4)));
    EXPECT_EQ(k->log_sum_exp(x.data(), 0), -inf);
  }
  // The public entry point uses the active level.
  const std::vector<float> x = Random(100, 5, 3.0f);
  EXPECT_EQ(LogSumExp(x.data(), 100),
            kernels_internal::ActiveKernels().log_sum_exp(x.data(), 100));
}

// Every level's ArgMax picks what the scalar loop picks: ties to the first,
// NaNs never (unless in front), infinities, every tail length.
TEST(OpsTest, ArgMaxEveryLevelIsTheScalarLoop) {
  const float inf = INFINITY, nan = NAN;
  std::vector<std::vector<float>> cases = {
      {3.0f},
      {1.0f, 5.0f, 5.0f, 2.0f},
      {nan, 1.0f, 9.0f},
      {1.0f, nan, 9.0f, nan},
      {-inf, -inf, -inf},
      {-inf, -3.0f, -inf},
      {0.0f, inf, inf, 1.0f},
      {-0.0f, 0.0f},
  };
  for (int64_t n : {1, 2, 15, 16, 17, 31, 33, 1000, 49152}) {
    for (uint32_t seed : {1u, 2u}) {
      std::vector<float> x = Random(n, seed + static_cast<uint32_t>(n), 4.0f);
      cases.push_back(x);
      x[n - 1] = 100.0f;  // the maximum in the tail
      cases.push_back(x);
      x[n / 2] = 100.0f;  // and tied earlier
      cases.push_back(x);
    }
  }
  for (const auto* k : kernels_internal::SupportedKernels()) {
    SCOPED_TRACE(k->name);
    for (const std::vector<float>& x : cases) {
      const auto n = static_cast<int64_t>(x.size());
      ASSERT_EQ(k->arg_max(x.data(), n),
                kernels_internal::ArgMaxScalar(x.data(), n))
          << "n=" << n;
    }
    EXPECT_EQ(k->arg_max(nullptr, 0), 0);
  }
  const std::vector<float> x = {1.0f, 7.0f, 7.0f};
  EXPECT_EQ(ArgMax(x.data(), 3), 1);
}

TEST(OpsTest, DotAndAxpyEveryLevel) {
  for (const auto* k : kernels_internal::SupportedKernels()) {
    for (int64_t n : {0, 1, 3, 8, 15, 16, 17, 31, 64, 100, 1000}) {
      SCOPED_TRACE(std::string(k->name) + " n=" + std::to_string(n));
      std::vector<float> a = Random(n, 8), b = Random(n, 9);
      double want = 0, abs_sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        want += double{a[i]} * b[i];
        abs_sum += std::fabs(double{a[i]} * b[i]);
      }
      EXPECT_NEAR(k->dot(a.data(), b.data(), n), want, 1e-6 * abs_sum + 1e-7);
      std::vector<float> y = b;
      k->axpy(0.75f, a.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(y[i], b[i] + 0.75 * a[i],
                    1e-6 * (std::fabs(b[i]) + std::fabs(a[i])));
      }
    }
  }
  std::vector<float> a = Random(50, 1), b = Random(50, 2);
  EXPECT_EQ(Dot(a.data(), b.data(), 50),
            kernels_internal::ActiveKernels().dot(a.data(), b.data(), 50));
}

}  // namespace
}  // namespace pdserve
