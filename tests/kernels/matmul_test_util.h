// Shared by the MatMul tests: random weights of every dtype, activations
// with outliers, and the check against the double-precision reference.
#ifndef PDSERVE_TESTS_KERNELS_MATMUL_TEST_UTIL_H_
#define PDSERVE_TESTS_KERNELS_MATMUL_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"

namespace pdserve::test {

using kernels_internal::IsQuantized;
using kernels_internal::MatMulWith;

inline constexpr DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16,
                               DType::kQ8_0, DType::kQ4_0, DType::kQ4_1};

// A random weight matrix stored as `type`, with its dequantized values.
struct TestWeights {
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // rows x cols, what the kernels really multiply
  WeightView view;
};

inline TestWeights MakeWeights(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  TestWeights w;
  const int64_t row_bytes = RowBytes(type, cols).value();
  w.bytes.resize(row_bytes * rows);
  w.deq.resize(rows * cols);
  std::vector<float> src(cols);
  for (int64_t r = 0; r < rows; ++r) {
    // Vary magnitude across rows and give some blocks an offset (Q4_1 min).
    const float scale = 0.2f + 0.1f * (r % 7);
    for (int64_t i = 0; i < cols; ++i) {
      src[i] = dist(rng) * scale + ((i / 32) % 3 == 1 ? 0.3f : 0.0f);
    }
    QuantizeRow(type, src.data(), w.bytes.data() + r * row_bytes, cols);
    DequantizeRow(type, w.bytes.data() + r * row_bytes, &w.deq[r * cols], cols);
  }
  w.view = WeightView{type, rows, cols, row_bytes, w.bytes.data()};
  return w;
}

inline std::vector<float> MakeActivations(int64_t n_tokens, int64_t stride,
                                   uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n_tokens * stride);
  for (float& v : x) v = dist(rng);
  // An outlier per token makes activation-quantization error visible.
  for (int64_t t = 0; t < n_tokens; ++t) x[t * stride + (t * 37) % stride] *= 6;
  return x;
}

// The largest error quantizing x (f32) to Q8 blocks can cause in row r:
// each value moves by at most half a step (amax / 254) of its block.
inline double ActQuantBound(const TestWeights& w, int64_t r, const float* x) {
  const int64_t cols = w.view.cols;
  double bound = 0.0;
  for (int64_t b = 0; b < cols / 32; ++b) {
    double amax = 0.0, wsum = 0.0;
    for (int j = 0; j < 32; ++j) {
      amax = std::max(amax, std::fabs(static_cast<double>(x[b * 32 + j])));
      wsum += std::fabs(w.deq[r * cols + b * 32 + j]);
    }
    bound += wsum * amax / 254.0;
  }
  return bound;
}

// x rounded to bf16 (to nearest, ties to even), as a double.
inline double RoundToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

// Packs w for k (when k packs w's type) into `buffer` and returns the view.
inline WeightView PackedView(const kernels_internal::IsaKernels& k,
                             const TestWeights& w,
                             std::vector<uint8_t>& buffer) {
  const int64_t bytes = kernels_internal::PackedWeightBytesWith(k, w.view);
  if (bytes == 0) return w.view;
  buffer.assign(bytes + 64, 0xA5);  // garbage where packing writes nothing
  const auto addr = reinterpret_cast<uintptr_t>(buffer.data());
  return kernels_internal::PackWeightsWith(
      k, w.view, buffer.data() + (64 - addr % 64) % 64);
}

// MatMulWith(k) against MatMulReference within the bound of f32 rounding
// plus (quantized types) activation quantization; `pack` runs the product
// on the weights packed for k (when k packs this type).
inline void CheckAgainstReference(const kernels_internal::IsaKernels& k,
                                  DType type, int64_t rows, int64_t cols,
                                  int64_t n_tokens, ThreadPool& pool,
                                  bool pack = false) {
  SCOPED_TRACE(std::string(k.name) + " " + DTypeName(type) + " rows=" +
               std::to_string(rows) + " cols=" + std::to_string(cols) +
               " tokens=" + std::to_string(n_tokens) +
               (pack ? " packed" : ""));
  TestWeights w = MakeWeights(type, rows, cols, rows * 31 + cols);
  std::vector<uint8_t> packed;
  if (pack) w.view = PackedView(k, w, packed);
  const bool bf16_x = type == DType::kBF16 && w.view.packed != nullptr &&
                      k.packed != nullptr && k.packed->bf16_activations;
  const int64_t x_stride = cols + 3;
  const int64_t y_stride = rows + 5;
  const std::vector<float> x = MakeActivations(n_tokens, x_stride, cols + 7);
  std::vector<float> y(n_tokens * y_stride, -1.0f);
  std::vector<float> ref(n_tokens * y_stride, -1.0f);
  MatMulWith(k, w.view, x.data(), x_stride, n_tokens, y.data(), y_stride, pool);
  MatMulReference(w.view, x.data(), x_stride, n_tokens, ref.data(), y_stride);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = &x[t * x_stride];
    // The activations as the quantized kernels see them (Q8 blocks), or as
    // bf16 dot kernels do.
    std::vector<double> xhat(cols);
    if (bf16_x) {
      for (int64_t i = 0; i < cols; ++i) xhat[i] = RoundToBf16(xt[i]);
    }
    if (IsQuantized(type)) {
      for (int64_t b = 0; b < cols / 32; ++b) {
        int8_t q[32];
        float d;
        int32_t sum;
        kernels_internal::QuantizeActBlock(xt + b * 32, q, &d, &sum);
        for (int j = 0; j < 32; ++j) xhat[b * 32 + j] = double{d} * q[j];
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      double abs_dot = 0.0;
      for (int64_t i = 0; i < cols; ++i) {
        abs_dot += std::fabs(w.deq[r * cols + i] * static_cast<double>(xt[i]));
      }
      // f32 accumulation error, plus (quantized types) activation rounding.
      double tol = 2e-6 * abs_dot + 1e-6;
      // BF16 as a bf16 dot: each activation rounded to bf16 moves by at most
      // 2^-8 of itself (half of its 7-bit mantissa step).
      if (bf16_x) tol += abs_dot / 256.0;
      if (IsQuantized(type))
        tol += 1.001 * ActQuantBound(w, r, xt) + 1e-5 * abs_dot;
      const float got = y[t * y_stride + r];
      const float want = ref[t * y_stride + r];
      ASSERT_LE(std::fabs(static_cast<double>(got) - want), tol)
          << "t=" << t << " r=" << r << " got " << got << " want " << want;
      if (IsQuantized(type) || bf16_x) {
        // Against the exact product with the quantized (bf16) activations,
        // only f32 rounding (scales, block sums) remains.
        double exact = 0.0;
        for (int64_t i = 0; i < cols; ++i)
          exact += w.deq[r * cols + i] * xhat[i];
        ASSERT_LE(std::fabs(got - exact), 4e-6 * abs_dot + 1e-6)
            << "t=" << t << " r=" << r << " got " << got << " want " << exact;
      }
    }
    // Padding between rows of y is untouched.
    for (int64_t r = rows; r < y_stride; ++r)
      ASSERT_EQ(y[t * y_stride + r], -1.0f);
  }
}

}  // namespace pdserve::test

#endif  // PDSERVE_TESTS_KERNELS_MATMUL_TEST_UTIL_H_
