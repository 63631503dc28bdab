// Element types of weight tensors and their storage layout.
//
// Quantized types follow the GGML block layouts bit for bit, so GGUF tensor
// data can be used in place (memory-mapped) without conversion:
//   Q8_0: 32 values per block: f16 scale d, then 32 x int8 q;  x = d * q.
//   Q4_0: 32 values per block: f16 scale d, then 16 bytes of nibbles;
//         value j (j < 16) is the low nibble of byte j, value j + 16 the high
//         nibble of byte j;  x = d * (nibble - 8).
//   Q4_1: 32 values per block: f16 scale d, f16 minimum m, then 16 bytes of
//         nibbles (same order as Q4_0);  x = d * nibble + m.
#ifndef PDSERVE_KERNELS_DTYPE_H_
#define PDSERVE_KERNELS_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/status/statusor.h"

namespace pdserve {

// Weight element types. The numeric values are the GGML type ids, so a GGUF
// tensor's type field maps onto this enum directly where it is supported.
enum class DType : int32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kBF16 = 30,
};

inline constexpr int kQuantBlockSize = 32;  // values per Q8_0/Q4_0/Q4_1 block

// A DType as a type, for dispatching to code templated on the element type.
template <DType kType>
using DTypeTag = std::integral_constant<DType, kType>;

// Calls `f(DTypeTag<type>{})` with `type` made a compile-time constant, for
// the types in `kTypes` (default: every DType); other types do nothing.
//   VisitDType(w.type, [&](auto t) { Kernel<decltype(t)::value>(...); });
template <DType... kTypes, typename F>
void VisitDType(DType type, F&& f) {
  if constexpr (sizeof...(kTypes) == 0) {
    VisitDType<DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
               DType::kQ4_0, DType::kQ4_1>(type, std::forward<F>(f));
  } else {
    ((type == kTypes ? (f(DTypeTag<kTypes>{}), true) : false) || ...);
  }
}

struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;  // f16 scale
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d;  // f16 scale
  uint16_t m;  // f16 minimum
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);

// Human-readable name ("F32", "Q4_1", ...).
const char* DTypeName(DType type);

// Maps a GGML type id to DType; kUnimplemented names the id when unsupported.
absl::StatusOr<DType> DTypeFromGgmlId(int64_t ggml_type);

// Values per storage block (1 for F32/F16/BF16, 32 for the quantized types).
int64_t DTypeBlockValues(DType type);
// Bytes per storage block.
int64_t DTypeBlockBytes(DType type);
// Bytes needed for one row of `n` values; n must be a multiple of the block
// size (checked by RowBytes, which returns an error otherwise).
absl::StatusOr<int64_t> RowBytes(DType type, int64_t n);

// IEEE half and bfloat16 conversions (round to nearest even on the way down).
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);
inline float BF16ToF32(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof(f));
  return f;
}
uint16_t F32ToBF16(float f);

// Dequantizes `n` values (a multiple of the block size for quantized types)
// starting at `src` into `dst`. Scalar reference implementation.
void DequantizeRow(DType type, const void* src, float* dst, int64_t n);

// Quantizes `n` values (a multiple of the block size for quantized types) from
// `src` into `dst` (RowBytes(type, n) bytes), with GGML's reference rounding:
//   Q8_0: d = amax / 127, q = round(x / d).
//   Q4_0: d = max / -8 (max = the value of largest magnitude, with its sign),
//         q = min(15, (int)(x / d + 8.5)).
//   Q4_1: d = (max - min) / 15, m = min, q = min(15, (int)((x - m) / d + 0.5)).
//   F16/BF16: round to nearest even.
void QuantizeRow(DType type, const float* src, void* dst, int64_t n);

}  // namespace pdserve

#endif  // PDSERVE_KERNELS_DTYPE_H_
