#include "engine/formats/gguf_requantize.h"

#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/formats/gguf_writer.h"

namespace pdserve {

int64_t GgufFileTypeOf(DType type) {
  switch (type) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ4_1:
      return 3;
    case DType::kQ8_0:
      return 7;
    case DType::kBF16:
      return 32;
  }
  return 0;
}

absl::StatusOr<DType> ParseDTypeName(const std::string& name) {
  const std::string upper = absl::AsciiStrToUpper(name);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                  DType::kQ4_0, DType::kQ4_1}) {
    if (upper == DTypeName(t)) return t;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown type '", name, "' (expected Q8_0, Q4_0, Q4_1, F16, BF16, F32)"));
}

namespace {

// Converts `rows` rows of `cols` values from `src_type` to `dst_type`.
void ConvertRows(const GgufTensorInfo& t, DType dst_type, int64_t rows,
                 int64_t cols, uint8_t* dst) {
  const int64_t src_row = *RowBytes(t.type, cols);
  const int64_t dst_row = *RowBytes(dst_type, cols);
  std::vector<float> buf(cols);
  const auto* src = static_cast<const uint8_t*>(t.data);
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(t.type, src + r * src_row, buf.data(), cols);
    QuantizeRow(dst_type, buf.data(), dst + r * dst_row, cols);
  }
}

}  // namespace

absl::StatusOr<RequantizeStats> RequantizeGguf(const GgufFile& in, DType type,
                                               const std::string& out_path) {
  GgufWriter w;
  w.set_alignment(in.alignment());
  for (const auto& [key, value] : in.metadata()) w.SetValue(key, value);
  GgufValue ftype;
  ftype.type = GgufValue::Type::kUint32;
  ftype.i = GgufFileTypeOf(type);
  w.SetValue("general.file_type", ftype);
  RequantizeStats stats;
  for (const GgufTensorInfo& t : in.tensors()) {
    const int64_t cols = t.dims[0];
    const int64_t rows = t.rows();
    DType out_type = type;
    if (t.dims.size() == 1) {
      out_type = DType::kF32;
      ++stats.vectors;
    } else if (t.type == type) {
      ++stats.copied;
    } else if (!RowBytes(type, cols).ok()) {
      out_type = DType::kF16;
      ++stats.fallback_f16;
    } else {
      ++stats.converted;
    }
    stats.in_bytes += t.num_bytes;
    stats.out_bytes += *RowBytes(out_type, cols) * rows;
    const GgufTensorInfo* info = &t;
    absl::Status s =
        w.AddTensor(t.name, out_type, t.dims,
                    [info, out_type, rows, cols](uint8_t* dst, int64_t n) {
                      if (info->type == out_type) {
                        std::memcpy(dst, info->data, n);
                      } else {
                        ConvertRows(*info, out_type, rows, cols, dst);
                      }
                      return absl::OkStatus();
                    });
    if (!s.ok()) return s;
  }
  if (absl::Status s = w.WriteFile(out_path); !s.ok()) return s;
  return stats;
}

}  // namespace pdserve
