// Matrix products of a weight matrix (any DType) with f32 activations.
#ifndef PDSERVE_KERNELS_MATMUL_H_
#define PDSERVE_KERNELS_MATMUL_H_

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/thread_pool.h"

namespace pdserve {

// A read-only view of a row-major weight matrix W[rows][cols] stored as
// `type`: row r starts at data + r * row_bytes. Does not own the memory (it
// usually points into a memory-mapped model file). cols is a multiple of the
// block size for quantized types.
struct WeightView {
  DType type = DType::kF32;
  int64_t rows = 0;       // output features
  int64_t cols = 0;       // input features
  int64_t row_bytes = 0;  // bytes between consecutive rows
  const void* data = nullptr;

  bool empty() const { return data == nullptr; }
  const uint8_t* row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + r * row_bytes;
  }
};

// Computes y[t][o] = sum_i W[o][i] * x[t][i] for t < n_tokens, o < W.rows.
// x rows are x_stride floats apart, y rows y_stride floats apart; x and y must
// not overlap. This is a real GEMM for n_tokens > 1: each weight block is read
// once per call and applied to all tokens. Uses every thread of `pool`; SIMD
// level is chosen at run time (AVX-512, AVX2+FMA, scalar). Quantized weights
// may quantize activations to 8 bits internally (as GGML does); results then
// differ from the f32 product by that rounding.
void MatMul(const WeightView& w, const float* x, int64_t x_stride,
            int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool);

// Scalar reference for tests: dequantizes each row and accumulates in double.
void MatMulReference(const WeightView& w, const float* x, int64_t x_stride,
                     int64_t n_tokens, float* y, int64_t y_stride);

// The instruction set the dispatcher selected: "avx512", "avx2", "scalar".
const char* MatMulIsa();

}  // namespace pdserve

#endif  // PDSERVE_KERNELS_MATMUL_H_
