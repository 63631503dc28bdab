// Rewrites a GGUF model with its weight matrices in another element type
// (the engine of `pdserve quantize`).
#ifndef PDSERVE_ENGINE_FORMATS_GGUF_REQUANTIZE_H_
#define PDSERVE_ENGINE_FORMATS_GGUF_REQUANTIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/formats/gguf.h"
#include "kernels/dtype.h"

namespace pdserve {

// What RequantizeGguf did.
struct RequantizeStats {
  int64_t converted = 0;     // matrices written in the target type
  int64_t copied = 0;        // matrices already in the target type (bytes kept)
  int64_t fallback_f16 = 0;  // matrices whose rows are not whole blocks of the
                             // target type, written as F16 instead
  int64_t vectors = 0;       // 1-D tensors (written as F32)
  int64_t in_bytes = 0;      // tensor data bytes read
  int64_t out_bytes = 0;     // tensor data bytes written (before padding)
};

// The llama.cpp `general.file_type` (llama_ftype) for a model whose
// matrices are mostly `type`.
int64_t GgufFileTypeOf(DType type);

// Writes `out_path` (GGUF v3, same alignment as `in`): every tensor of two or
// more dims is dequantized row by row (DequantizeRow) and requantized
// (QuantizeRow) into `type`, or copied byte for byte when already `type`;
// 1-D tensors are written as F32. All metadata is copied, with
// general.file_type set to GgufFileTypeOf(type). Memory: one tensor at a time.
absl::StatusOr<RequantizeStats> RequantizeGguf(const GgufFile& in, DType type,
                                               const std::string& out_path);

// Parses "Q8_0", "q4_0", "F16", "bf16", ... (case-insensitive).
absl::StatusOr<DType> ParseDTypeName(const std::string& name);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_FORMATS_GGUF_REQUANTIZE_H_
