#include "engine/kv/kv_dtype.h"

#include "absl/strings/str_cat.h"

namespace pdserve {

absl::StatusOr<KvDType> ParseKvDType(absl::string_view text) {
  for (KvDType d :
       {KvDType::kF32, KvDType::kF16, KvDType::kBF16, KvDType::kQ8_0}) {
    if (text == KvDTypeName(d)) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--kv-dtype '", text, "' is not one of f32, f16, bf16, q8_0"));
}

int64_t KvRowBytes(KvDType dtype, int64_t kv_dim) {
  switch (dtype) {
    case KvDType::kF32:
      return kv_dim * 4;
    case KvDType::kF16:
    case KvDType::kBF16:
      return kv_dim * 2;
    case KvDType::kQ8_0:
      return kv_dim + kv_dim / 32 * 2;
  }
  return kv_dim * 4;
}

absl::Status CheckKvDType(KvDType dtype, int64_t kv_dim, int64_t head_dim) {
  if (head_dim <= 0 || kv_dim <= 0 || kv_dim % head_dim != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV heads of ", head_dim, " elements cannot make up ",
                     "kv_dim ", kv_dim));
  }
  if (dtype == KvDType::kQ8_0 && head_dim % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-dtype q8_0 needs a head dimension that is a multiple of 32; ",
        "this model's is ", head_dim));
  }
  if (dtype != KvDType::kF32 && head_dim > 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-dtype ", KvDTypeName(dtype), " supports head dimensions up to ",
        "256; this model's is ", head_dim, " (use --kv-dtype f32)"));
  }
  return absl::OkStatus();
}

absl::Status CheckKvPageSize(KvDType dtype, int64_t page_size) {
  if (dtype == KvDType::kBF16 && page_size % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-dtype bf16 stores slots in pairs and needs an even page size; "
        "got ", page_size));
  }
  return absl::OkStatus();
}

}  // namespace pdserve
