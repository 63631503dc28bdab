// Matrix products of a weight matrix (any DType) with f32 activations.
#ifndef PDSERVE_KERNELS_MATMUL_H_
#define PDSERVE_KERNELS_MATMUL_H_

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/thread_pool.h"

namespace pdserve {

// Layouts a weight matrix can be repacked into at load (PackWeights), each
// owned by one SIMD level's kernels.
enum class PackFormat : int32_t {
  kNone = 0,
  // AVX2: rows interleaved in groups of 8 (see matmul_avx2_packed.cc).
  kAvx2Rows8 = 1,
  // AVX-512: rows interleaved in groups of 16, quantized blocks in VNNI
  // order (see matmul_avx512_packed.cc).
  kAvx512Rows16 = 2,
};

// A read-only view of a row-major weight matrix W[rows][cols] stored as
// `type`: row r starts at data + r * row_bytes. Does not own the memory (it
// usually points into a memory-mapped model file). cols is a multiple of the
// block size for quantized types.
//
// `packed`, when set, is the same matrix repacked by PackWeights into
// `pack_format` (also not owned): MatMul then reads it instead of `data`
// whenever the kernels it runs with use that format, and ignores it
// otherwise. `data` stays the row-major original (embedding lookups, device
// uploads and the other SIMD levels read it).
struct WeightView {
  DType type = DType::kF32;
  int64_t rows = 0;       // output features
  int64_t cols = 0;       // input features
  int64_t row_bytes = 0;  // bytes between consecutive rows
  const void* data = nullptr;
  const void* packed = nullptr;
  PackFormat pack_format = PackFormat::kNone;

  bool empty() const { return data == nullptr; }
  const uint8_t* row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + r * row_bytes;
  }
};

// Computes y[t][o] = sum_i W[o][i] * x[t][i] for t < n_tokens, o < W.rows.
// x rows are x_stride floats apart, y rows y_stride floats apart; x and y must
// not overlap. This is a real GEMM for n_tokens > 1: each weight block is read
// from memory once per call and applied to tiles of tokens held in registers.
// Threads of `pool` split the output rows (never the reduction). The SIMD
// level is chosen once at run time (AVX-512 VNNI, AVX2+FMA+F16C, scalar);
// the environment variable PDSERVE_ISA=scalar|avx2|avx512 can lower it.
//
// Quantized weights (Q8_0/Q4_0/Q4_1) quantize each token's activations to
// 8-bit blocks of 32 with an f32 scale (GGML's Q8_0/Q8_1) and use exact
// integer dot products per block; results then differ from the f32 product by
// that rounding: at most sum over blocks of sum|w| * amax(x_block) / 254.
//
// Batch invariance: y[t][o] is bitwise identical whatever n_tokens is, where
// token t sits in the batch, and how many threads the pool has (for a given
// SIMD level). Steady-state calls do not allocate: the activation scratch
// grows once per calling thread and is reused.
void MatMul(const WeightView& w, const float* x, int64_t x_stride,
            int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool);

// Bytes PackWeights needs for `w` with the kernels MatMul uses; 0 when those
// kernels read w's row-major layout as it is (nothing to pack).
int64_t PackedWeightBytes(const WeightView& w);

// Writes w repacked for the kernels MatMul uses into `dst`
// (PackedWeightBytes(w) bytes, 64-byte aligned) and returns w with `packed`
// and `pack_format` set; returns w unchanged when PackedWeightBytes(w) == 0.
// Results of MatMul are the same with and without packing up to the
// kernels' own rounding (both paths are tested against the reference), and
// packed products keep the batch-invariance contract below.
WeightView PackWeights(const WeightView& w, void* dst);

// Scalar reference for tests: dequantizes each row and accumulates in double.
void MatMulReference(const WeightView& w, const float* x, int64_t x_stride,
                     int64_t n_tokens, float* y, int64_t y_stride);

// The instruction set the dispatcher selected: "avx512", "avx2", "scalar".
const char* MatMulIsa();

}  // namespace pdserve

#endif  // PDSERVE_KERNELS_MATMUL_H_
