// The element type of the KV cache (--kv-dtype) and its byte sizes.
#ifndef PDSERVE_ENGINE_KV_KV_DTYPE_H_
#define PDSERVE_ENGINE_KV_KV_DTYPE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pdserve {

// How keys and values are stored (engine/kv/kv_storage.h has the layouts).
//   kF32:  4 bytes per element, the reference.
//   kF16:  IEEE half, round to nearest even.
//   kBF16: bfloat16, round to nearest even (the CPU default).
//   kQ8_0: GGML's Q8_0 (blocks of 32 int8 along the head dimension with one
//          f16 scale each: 34 bytes per 32 elements); head_dim % 32 == 0.
enum class KvDType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2, kQ8_0 = 3 };

// "f32", "f16", "bf16", "q8_0" (inline: the CUDA plugin names it too).
inline const char* KvDTypeName(KvDType dtype) {
  switch (dtype) {
    case KvDType::kF32:
      return "f32";
    case KvDType::kF16:
      return "f16";
    case KvDType::kBF16:
      return "bf16";
    case KvDType::kQ8_0:
      return "q8_0";
  }
  return "unknown";
}

// Parses a --kv-dtype value (one of the names above); INVALID_ARGUMENT
// naming the text and the choices otherwise.
absl::StatusOr<KvDType> ParseKvDType(absl::string_view text);

// Bytes of the keys (or of the values) of one token in one layer: kv_dim
// elements (kv_dim % 32 == 0 for kQ8_0).
int64_t KvRowBytes(KvDType dtype, int64_t kv_dim);

// OK when `dtype` can store heads of `head_dim` elements making up `kv_dim`;
// INVALID_ARGUMENT with the numbers otherwise (head_dim must divide kv_dim;
// Q8_0 needs head_dim % 32 == 0; the 16- and 8-bit types head_dim <= 256).
absl::Status CheckKvDType(KvDType dtype, int64_t kv_dim, int64_t head_dim);

// OK when pages of `page_size` tokens fit the dtype's layout (bf16 stores
// slots in pairs: an even page size); INVALID_ARGUMENT naming it otherwise.
absl::Status CheckKvPageSize(KvDType dtype, int64_t page_size);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_KV_KV_DTYPE_H_
