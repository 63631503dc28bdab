// Internal interface between the MatMul dispatcher (matmul.cc) and the
// per-ISA kernel files (matmul_scalar.cc, matmul_avx2.cc, matmul_avx512.cc).
// Not for use outside kernels/.
//
// Quantized weights: the dispatcher asks the ISA to "prepare" the f32
// activations once per call (quantize them to 8-bit blocks of 32 with one f32
// scale each, in an ISA-specific layout inside a caller-owned scratch buffer)
// and then to compute a range of output rows. Float weights (F32/F16/BF16) use
// the f32 activations directly.
//
// Batch invariance contract: for a given ISA, the value written for output
// (row o, token t) depends only on W[o], x[t] and cols — never on n_tokens,
// on t's position in the batch, or on the row range being computed.
#ifndef PDSERVE_KERNELS_MATMUL_INTERNAL_H_
#define PDSERVE_KERNELS_MATMUL_INTERNAL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/matmul.h"

namespace pdserve::kernels_internal {

constexpr bool IsQuantized(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_1;
}
inline bool IsQuantizedType(DType t) { return IsQuantized(t); }

// Quantizes one block of 32 activations GGML-style (Q8_0 / Q8_1):
// d = amax / 127, q = round-to-nearest-even(x / d); sum = sum of q.
inline void QuantizeActBlock(const float* x, int8_t* q, float* d,
                             int32_t* sum) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float a = std::fabs(x[j]);
    amax = a > amax ? a : amax;
  }
  const float scale = amax / 127.0f;
  const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
  int32_t s = 0;
  for (int j = 0; j < 32; ++j) {
    const int v = static_cast<int>(std::nearbyint(x[j] * inv));
    q[j] = static_cast<int8_t>(v);
    s += v;
  }
  *d = scale;
  *sum = s;
}

// Everything a row kernel needs for one MatMul call.
struct MatMulArgs {
  const WeightView* w;
  const float* x;     // f32 activations (float weight types)
  int64_t x_stride;   // floats between tokens of x
  const uint8_t* xq;  // prepared activations (quantized weight types)
  int64_t n_tokens;
  float* y;
  int64_t y_stride;  // floats between tokens of y
};

// Kernels over weights repacked at load (WeightView::packed) in `format`.
// Quantized packed products prepare their activations in their own layout.
struct PackedKernels {
  PackFormat format;
  // Rows per packed group: row ranges handed to `rows` start at a multiple.
  int64_t row_tile;
  // Bytes of the packed copy of a rows x cols matrix of `type`; 0 when this
  // level does not pack the type (MatMul then reads the row-major layout).
  int64_t (*packed_bytes)(DType type, int64_t rows, int64_t cols);
  // Writes the packed copy of w into dst (packed_bytes bytes, 64-aligned).
  void (*pack)(const WeightView& w, uint8_t* dst);
  int64_t (*prepared_bytes)(DType type, int64_t cols, int64_t n_tokens);
  void (*prepare)(DType type, const float* x, int64_t x_stride, int64_t cols,
                  int64_t n_tokens, int64_t t_begin, int64_t t_end,
                  uint8_t* xq);
  // Computes y for rows [row_begin, row_end) and all tokens from
  // args.w->packed.
  void (*rows)(const MatMulArgs& args, int64_t row_begin, int64_t row_end);
  // Whether products of `type` read prepared activations (args.xq): the
  // quantized types, and BF16 where it runs as a bf16 dot.
  bool (*needs_prepare)(DType type) = &IsQuantizedType;
  // BF16 products round the activations to bf16 (round to nearest even)
  // before multiplying (vdpbf16ps); otherwise they use them as f32.
  bool bf16_activations = false;
  // Row ranges handed to threads are whole multiples of this many row tiles
  // (see kTilesPerSplit).
  int64_t tiles_per_split = 4;
};

// One SIMD level's entry points.
struct IsaKernels {
  const char* name;
  // Rows per thread-split unit (the kernels' row tile).
  int64_t row_tile;
  // Bytes of scratch `prepare` needs for n_tokens tokens of `cols` values.
  int64_t (*prepared_bytes)(DType type, int64_t cols, int64_t n_tokens);
  // Quantizes tokens [t_begin, t_end) of x into `xq` (laid out for n_tokens).
  void (*prepare)(DType type, const float* x, int64_t x_stride, int64_t cols,
                  int64_t n_tokens, int64_t t_begin, int64_t t_end,
                  uint8_t* xq);
  // Computes y for rows [row_begin, row_end) and all tokens.
  void (*rows)(const MatMulArgs& args, int64_t row_begin, int64_t row_end);
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float a, const float* x, float* y, int64_t n);
  // out[i] = silu(gate[i]) * up[i]; every element gets the same arithmetic
  // wherever it sits in the array (the tail is masked, not scalar).
  void (*swiglu)(const float* gate, const float* up, int64_t n, float* out);
  void (*softmax)(float* x, int64_t n);
  // log(sum_i exp(x[i])) (see LogSumExp in ops.h).
  float (*log_sum_exp)(const float* x, int64_t n);
  // The index ArgMax returns (see ops.h).
  int64_t (*arg_max)(const float* x, int64_t n);
  // out[i] = gelu_tanh(x[i]) (see GeluTanh in ops.h).
  void (*gelu_tanh)(const float* x, int64_t n, float* out);
  // Packed-weight kernels; nullptr when this level reads row-major weights
  // only.
  const PackedKernels* packed = nullptr;
};

// The prepare/rows entry points one MatMul call uses: the packed kernels
// when w carries a packed copy in this level's format, else the row-major
// ones.
struct RowKernels {
  int64_t row_tile;
  int64_t (*prepared_bytes)(DType type, int64_t cols, int64_t n_tokens);
  void (*prepare)(DType type, const float* x, int64_t x_stride, int64_t cols,
                  int64_t n_tokens, int64_t t_begin, int64_t t_end,
                  uint8_t* xq);
  void (*rows)(const MatMulArgs& args, int64_t row_begin, int64_t row_end);
  bool (*needs_prepare)(DType type);  // see PackedKernels
  int64_t tiles_per_split;            // see PackedKernels
};
RowKernels KernelsFor(const IsaKernels& k, const WeightView& w);

// Row ranges handed to threads are whole multiples of this many kernel
// tiles (except a matrix's last range) for the row-major kernels; packed
// kernels set their own (PackedKernels::tiles_per_split).
inline constexpr int64_t kTilesPerSplit = 4;

// PackedWeightBytes / PackWeights with an explicit kernel set.
int64_t PackedWeightBytesWith(const IsaKernels& k, const WeightView& w);
WeightView PackWeightsWith(const IsaKernels& k, const WeightView& w,
                           void* dst);

// Scalar element-wise ops (ops.cc), the fallback entries of the table.
void SwiGluScalar(const float* gate, const float* up, int64_t n, float* out);
void GeluTanhScalar(const float* x, int64_t n, float* out);
void SoftmaxScalar(float* x, int64_t n);
float LogSumExpScalar(const float* x, int64_t n);
int64_t ArgMaxScalar(const float* x, int64_t n);
// max + log(sum_exp) in double, as a float; sum_exp = sum of exp(x[i] - max).
inline float LogSumExpFinish(float max, double sum_exp) {
  return static_cast<float>(static_cast<double>(max) + std::log(sum_exp));
}

const IsaKernels& ScalarKernels();
// These exist only on x86-64 builds; callers check CPU support first.
const IsaKernels& Avx2Kernels();
const PackedKernels& Avx2PackedKernels();
const IsaKernels& Avx512Kernels();
// The AVX-512 packed kernels (PackFormat::kAvx512Rows16); BF16 runs as a
// bf16 dot (vdpbf16ps) when bf16_dot is set, else widened to f32. Both read
// the same packed layout; Avx512Kernels() uses the dot where the CPU has
// AVX512-BF16 (CpuHasAvx512Bf16).
const PackedKernels& Avx512PackedKernels(bool bf16_dot);
bool CpuHasAvx512Bf16();

// The kernels MatMul uses (chosen once; honours PDSERVE_ISA).
const IsaKernels& ActiveKernels();

// Every level this CPU supports, lowest first (for tests and benchmarks).
std::vector<const IsaKernels*> SupportedKernels();

// MatMul with an explicit kernel set (MatMul uses ActiveKernels()).
void MatMulWith(const IsaKernels& k, const WeightView& w, const float* x,
                int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride,
                ThreadPool& pool);

// A growable 64-byte-aligned buffer, for one thread's scratch space
// (declare it thread_local): reused across calls, so steady-state calls do
// not allocate. A growth takes at least `min_bytes` and half again the old
// capacity. Contents are not kept across a growth.
class AlignedScratch {
 public:
  uint8_t* Get(int64_t bytes, int64_t min_bytes = 0) {
    if (bytes > capacity_) {
      const int64_t cap = std::max({bytes, min_bytes, capacity_ * 3 / 2});
      raw_.reset(new uint8_t[cap + 64]);
      capacity_ = cap;
      const auto addr = reinterpret_cast<uintptr_t>(raw_.get());
      aligned_ = raw_.get() + ((64 - addr % 64) % 64);
    }
    return aligned_;
  }

 private:
  std::unique_ptr<uint8_t[]> raw_;
  int64_t capacity_ = 0;
  uint8_t* aligned_ = nullptr;
};

}  // namespace pdserve::kernels_internal

#endif  // PDSERVE_KERNELS_MATMUL_INTERNAL_H_
