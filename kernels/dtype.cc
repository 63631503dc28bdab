#include "kernels/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pdserve {

const char* DTypeName(DType type) {
  switch (type) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kQ8_0:
      return "Q8_0";
    case DType::kQ4_0:
      return "Q4_0";
    case DType::kQ4_1:
      return "Q4_1";
  }
  return "unknown";
}

absl::StatusOr<DType> DTypeFromGgmlId(int64_t ggml_type) {
  switch (ggml_type) {
    case 0:
      return DType::kF32;
    case 1:
      return DType::kF16;
    case 2:
      return DType::kQ4_0;
    case 3:
      return DType::kQ4_1;
    case 8:
      return DType::kQ8_0;
    case 30:
      return DType::kBF16;
    default:
      return absl::UnimplementedError(absl::StrCat(
          "GGML tensor type id ", ggml_type,
          " is not supported (supported: F32=0, F16=1, Q4_0=2, Q4_1=3, "
          "Q8_0=8, BF16=30)"));
  }
}

int64_t DTypeBlockValues(DType type) {
  switch (type) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
      return kQuantBlockSize;
    default:
      return 1;
  }
}

int64_t DTypeBlockBytes(DType type) {
  switch (type) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kQ8_0:
      return sizeof(BlockQ8_0);
    case DType::kQ4_0:
      return sizeof(BlockQ4_0);
    case DType::kQ4_1:
      return sizeof(BlockQ4_1);
  }
  return 0;
}

absl::StatusOr<int64_t> RowBytes(DType type, int64_t n) {
  const int64_t block = DTypeBlockValues(type);
  if (n < 0 || n % block != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a row of ", n, " values is not a multiple of the ",
                     DTypeName(type), " block size ", block));
  }
  return n / block * DTypeBlockBytes(type);
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 |
             (mant & 0x3ff) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t F32ToF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00 |
                                 (abs > 0x7f800000u ? 0x200 : 0));
  }
  if (abs >= 0x477ff000u)
    return static_cast<uint16_t>(sign | 0x7c00);  // overflow
  if (abs < 0x38800000u) {                        // subnormal or zero in half
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t mant = (abs & 0x7fffff) | 0x800000;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14..24
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((abs >> 23) - 127 + 15) << 10 | (abs & 0x7fffff) >> 13;
  const uint32_t rem = abs & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return static_cast<uint16_t>(sign | half);
}

uint16_t F32ToBF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffff) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

void DequantizeRow(DType type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(s[i]);
      return;
    }
    case DType::kQ8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t k = 0; k < n / kQuantBlockSize; ++k) {
        const float d = F16ToF32(b[k].d);
        for (int j = 0; j < 32; ++j) dst[k * 32 + j] = d * b[k].qs[j];
      }
      return;
    }
    case DType::kQ4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t k = 0; k < n / kQuantBlockSize; ++k) {
        const float d = F16ToF32(b[k].d);
        for (int j = 0; j < 16; ++j) {
          dst[k * 32 + j] = d * ((b[k].qs[j] & 0x0f) - 8);
          dst[k * 32 + j + 16] = d * ((b[k].qs[j] >> 4) - 8);
        }
      }
      return;
    }
    case DType::kQ4_1: {
      const auto* b = static_cast<const BlockQ4_1*>(src);
      for (int64_t k = 0; k < n / kQuantBlockSize; ++k) {
        const float d = F16ToF32(b[k].d);
        const float m = F16ToF32(b[k].m);
        for (int j = 0; j < 16; ++j) {
          dst[k * 32 + j] = d * (b[k].qs[j] & 0x0f) + m;
          dst[k * 32 + j + 16] = d * (b[k].qs[j] >> 4) + m;
        }
      }
      return;
    }
  }
}

}  // namespace pdserve

namespace pdserve {
namespace {

void QuantizeQ8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t k = 0; k < nb; ++k, x += kQuantBlockSize) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[k].d = F32ToF16(d);
    for (int j = 0; j < 32; ++j) {
      y[k].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
    }
  }
}

void QuantizeQ4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t k = 0; k < nb; ++k, x += kQuantBlockSize) {
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[k].d = F32ToF16(d);
    for (int j = 0; j < 16; ++j) {
      const int lo =
          std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int hi = std::min(
          15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
      y[k].qs[j] = static_cast<uint8_t>(lo | hi << 4);
    }
  }
}

void QuantizeQ4_1(const float* x, BlockQ4_1* y, int64_t nb) {
  for (int64_t k = 0; k < nb; ++k, x += kQuantBlockSize) {
    float min = x[0];
    float max = x[0];
    for (int j = 1; j < 32; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[k].d = F32ToF16(d);
    y[k].m = F32ToF16(min);
    for (int j = 0; j < 16; ++j) {
      const int lo = std::min(
          15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
      const int hi = std::min(
          15,
          static_cast<int>(static_cast<int8_t>((x[j + 16] - min) * id + 0.5f)));
      y[k].qs[j] = static_cast<uint8_t>(lo | hi << 4);
    }
  }
}

}  // namespace

void QuantizeRow(DType type, const float* src, void* dst, int64_t n) {
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToF16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToBF16(src[i]);
      return;
    }
    case DType::kQ8_0:
      QuantizeQ8_0(src, static_cast<BlockQ8_0*>(dst), n / kQuantBlockSize);
      return;
    case DType::kQ4_0:
      QuantizeQ4_0(src, static_cast<BlockQ4_0*>(dst), n / kQuantBlockSize);
      return;
    case DType::kQ4_1:
      QuantizeQ4_1(src, static_cast<BlockQ4_1*>(dst), n / kQuantBlockSize);
      return;
  }
}

}  // namespace pdserve
