// Writer for GGUF v3 files: metadata of every GGUF type and tensors placed
// at the file's alignment. Used by `pdserve quantize` and by tests that build
// synthetic (and deliberately corrupted) model files.
#ifndef PDSERVE_ENGINE_FORMATS_GGUF_WRITER_H_
#define PDSERVE_ENGINE_FORMATS_GGUF_WRITER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/formats/gguf.h"
#include "kernels/dtype.h"

namespace pdserve {

// Accumulates metadata and tensor descriptions, then serializes them. Keys
// keep insertion order; setting an existing key replaces its value in place.
// Tensor data is produced lazily by a fill callback at write time, so a
// large model can be rewritten with one tensor's buffer in memory at a time.
// Not thread-safe.
class GgufWriter {
 public:
  // Writes the tensor's bytes (exactly num_bytes of them) into dst.
  using FillFn = std::function<absl::Status(uint8_t* dst, int64_t num_bytes)>;

  GgufWriter() = default;

  // Data alignment (a power of two). Values other than 32 are recorded as
  // the UINT32 key general.alignment.
  void set_alignment(uint32_t alignment);
  uint32_t alignment() const { return alignment_; }

  void SetValue(const std::string& key, GgufValue value);
  void SetUint8(const std::string& key, uint8_t v);
  void SetInt8(const std::string& key, int8_t v);
  void SetUint16(const std::string& key, uint16_t v);
  void SetInt16(const std::string& key, int16_t v);
  void SetUint32(const std::string& key, uint32_t v);
  void SetInt32(const std::string& key, int32_t v);
  void SetUint64(const std::string& key, uint64_t v);
  void SetInt64(const std::string& key, int64_t v);
  void SetFloat32(const std::string& key, float v);
  void SetFloat64(const std::string& key, double v);
  void SetBool(const std::string& key, bool v);
  void SetString(const std::string& key, const std::string& v);
  void SetStringArray(const std::string& key,
                      const std::vector<std::string>& v);
  // Integer arrays of element type `type` (any integer type or BOOL).
  void SetIntArray(const std::string& key, GgufValue::Type type,
                   const std::vector<int64_t>& v);
  void SetFloat32Array(const std::string& key, const std::vector<float>& v);

  // Adds a tensor with GGML-order dims (dims[0] innermost). InvalidArgument
  // for a duplicate name, bad dims or a dims[0] that is not a multiple of
  // the type's block size.
  absl::Status AddTensor(const std::string& name, DType type,
                         std::vector<int64_t> dims, FillFn fill);
  // Convenience: copies `bytes` (must be exactly the tensor's size).
  absl::Status AddTensor(const std::string& name, DType type,
                         std::vector<int64_t> dims, std::string bytes);
  // Convenience for F32 data (the type is F32).
  absl::Status AddF32Tensor(const std::string& name, std::vector<int64_t> dims,
                            const std::vector<float>& values);

  // Serializes to a file (written to `path`.tmp, then renamed).
  absl::Status WriteFile(const std::string& path) const;
  // Serializes into memory (tests; small files).
  absl::StatusOr<std::string> WriteToString() const;

 private:
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> dims;
    int64_t num_bytes;
    FillFn fill;
  };
  absl::Status Write(
      const std::function<absl::Status(const void*, size_t)>& sink) const;

  uint32_t alignment_ = kGgufDefaultAlignment;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_FORMATS_GGUF_WRITER_H_
