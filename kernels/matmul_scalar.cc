// Portable scalar kernels: the fallback on any CPU and the baseline the SIMD
// levels are tested against. Prepared activations, per token: nb blocks of 32
// int8 values, then nb f32 scales, then nb int32 block sums.
#include <cstring>

#include "kernels/matmul_internal.h"

namespace pdserve::kernels_internal {
namespace {

int64_t TokenBytes(int64_t cols) { return cols / 32 * (32 + 4 + 4); }

int64_t PreparedBytes(DType type, int64_t cols, int64_t n_tokens) {
  return TokenBytes(cols) * n_tokens;
}

void Prepare(DType type, const float* x, int64_t x_stride, int64_t cols,
             int64_t n_tokens, int64_t t_begin, int64_t t_end, uint8_t* xq) {
  const int64_t nb = cols / 32;
  for (int64_t t = t_begin; t < t_end; ++t) {
    uint8_t* base = xq + t * TokenBytes(cols);
    auto* q = reinterpret_cast<int8_t*>(base);
    auto* d = reinterpret_cast<float*>(base + nb * 32);
    auto* s = reinterpret_cast<int32_t*>(base + nb * 36);
    for (int64_t b = 0; b < nb; ++b) {
      QuantizeActBlock(x + t * x_stride + b * 32, q + b * 32, d + b, s + b);
    }
  }
}

float LoadWeight(DType type, const uint8_t* row, int64_t i) {
  switch (type) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, row + 4 * i, 4);
      return f;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * i, 2);
      return F16ToF32(h);
    }
    default: {  // BF16
      uint16_t h;
      std::memcpy(&h, row + 2 * i, 2);
      return BF16ToF32(h);
    }
  }
}

// One (row, token) pair of a float-weight product: sequential f32 sum.
float FloatRowDot(DType type, const uint8_t* row, const float* x,
                  int64_t cols) {
  float acc = 0.0f;
  for (int64_t i = 0; i < cols; ++i) acc += LoadWeight(type, row, i) * x[i];
  return acc;
}

// One (row, token) pair of a quantized product: exact integer dot per block,
// then a sequential f32 sum of the scaled block results.
float QuantRowDot(DType type, const uint8_t* row, const uint8_t* xtok,
                  int64_t nb) {
  const auto* xq = reinterpret_cast<const int8_t*>(xtok);
  const auto* xd = reinterpret_cast<const float*>(xtok + nb * 32);
  const auto* xs = reinterpret_cast<const int32_t*>(xtok + nb * 36);
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* q = xq + b * 32;
    int32_t dot = 0;
    if (type == DType::kQ8_0) {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
      for (int j = 0; j < 32; ++j) dot += blk->qs[j] * q[j];
      acc += F16ToF32(blk->d) * xd[b] * static_cast<float>(dot);
    } else if (type == DType::kQ4_0) {
      const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
      for (int j = 0; j < 16; ++j) {
        dot += (blk->qs[j] & 0x0f) * q[j] + (blk->qs[j] >> 4) * q[j + 16];
      }
      dot -= 8 * xs[b];
      acc += F16ToF32(blk->d) * xd[b] * static_cast<float>(dot);
    } else {  // Q4_1
      const auto* blk = reinterpret_cast<const BlockQ4_1*>(row) + b;
      for (int j = 0; j < 16; ++j) {
        dot += (blk->qs[j] & 0x0f) * q[j] + (blk->qs[j] >> 4) * q[j + 16];
      }
      acc += F16ToF32(blk->d) * xd[b] * static_cast<float>(dot);
      acc += F16ToF32(blk->m) * (xd[b] * static_cast<float>(xs[b]));
    }
  }
  return acc;
}

void Rows(const MatMulArgs& a, int64_t row_begin, int64_t row_end) {
  const WeightView& w = *a.w;
  const bool quant = IsQuantized(w.type);
  for (int64_t o = row_begin; o < row_end; ++o) {
    const uint8_t* row = w.row(o);
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      a.y[t * a.y_stride + o] =
          quant ? QuantRowDot(w.type, row, a.xq + t * TokenBytes(w.cols),
                              w.cols / 32)
                : FloatRowDot(w.type, row, a.x + t * a.x_stride, w.cols);
    }
  }
}

float Dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

void Axpy(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace

const IsaKernels& ScalarKernels() {
  static const IsaKernels k{
      "scalar", 4,     &PreparedBytes, &Prepare,       &Rows,
      &Dot,     &Axpy, &SwiGluScalar,  &SoftmaxScalar, &LogSumExpScalar,
      &ArgMaxScalar, &GeluTanhScalar};
  return k;
}

}  // namespace pdserve::kernels_internal
