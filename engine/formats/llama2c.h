// Reader for llama2.c legacy checkpoints (Karpathy's `run.c` format):
// a header of 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, seq_len; a negative vocab_size means a separate classifier
// follows), then f32 weights in a fixed order. The file is memory-mapped and
// its size must equal exactly what the header implies.
#ifndef PDSERVE_ENGINE_FORMATS_LLAMA2C_H_
#define PDSERVE_ENGINE_FORMATS_LLAMA2C_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace pdserve {

struct Llama2cHeader {
  int64_t dim = 0;
  int64_t hidden_dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t vocab_size = 0;  // absolute value of the stored field
  int64_t seq_len = 0;
  bool shared_classifier = true;  // stored vocab_size > 0

  int64_t head_size() const { return dim / n_heads; }
  int64_t kv_dim() const { return n_kv_heads * head_size(); }
  // Bytes the whole file must have (header included).
  int64_t ExpectedFileSize() const;
};

// Pointers into the mapped file, row-major, outermost dimension first
// (shapes as in llama2.c's TransformerWeights). Layer-stacked arrays hold
// n_layers consecutive blocks. Immutable; thread-safe for reads; the
// pointers stay valid while `mapping` (or a copy of it) lives.
struct Llama2cCheckpoint {
  std::string path;
  Llama2cHeader header;
  std::shared_ptr<const void> mapping;
  const float* token_embedding = nullptr;  // [vocab][dim]
  const float* rms_att = nullptr;          // [L][dim]
  const float* wq = nullptr;               // [L][dim][dim]
  const float* wk = nullptr;               // [L][kv_dim][dim]
  const float* wv = nullptr;               // [L][kv_dim][dim]
  const float* wo = nullptr;               // [L][dim][dim]
  const float* rms_ffn = nullptr;          // [L][dim]
  const float* w1 = nullptr;               // [L][hidden][dim] (gate)
  const float* w2 = nullptr;               // [L][dim][hidden] (down)
  const float* w3 = nullptr;               // [L][hidden][dim] (up)
  const float* rms_final = nullptr;        // [dim]
  const float* wcls = nullptr;  // [vocab][dim]; == token_embedding if shared

  // Reads and validates the header (positive, consistent and bounded
  // sizes) and the file size; InvalidArgument names the file and numbers.
  static absl::StatusOr<Llama2cCheckpoint> Open(const std::string& path);
};

// Parses and validates the 28-byte header alone.
absl::StatusOr<Llama2cHeader> ParseLlama2cHeader(const std::string& path,
                                                 const void* data,
                                                 uint64_t size);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_FORMATS_LLAMA2C_H_
