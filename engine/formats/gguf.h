// Reader for GGUF v2/v3 files (llama.cpp's model format), memory-mapped.
//
// Every offset, length and count read from the file is bounds-checked against
// the file size before use; a malformed file yields an error naming the file,
// the item (key or tensor) and what was expected, never an out-of-bounds read.
#ifndef PDSERVE_ENGINE_FORMATS_GGUF_H_
#define PDSERVE_ENGINE_FORMATS_GGUF_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"

namespace pdserve {

// One metadata value. Arrays hold scalars or strings of one element type.
struct GgufValue {
  enum class Type : uint32_t {
    kUint8 = 0,
    kInt8 = 1,
    kUint16 = 2,
    kInt16 = 3,
    kUint32 = 4,
    kInt32 = 5,
    kFloat32 = 6,
    kBool = 7,
    kString = 8,
    kArray = 9,
    kUint64 = 10,
    kInt64 = 11,
    kFloat64 = 12,
  };
  Type type = Type::kUint8;
  Type array_type = Type::kUint8;  // element type when type == kArray
  // Scalars: integers and bools in `i` (uint64 values above INT64_MAX are
  // rejected), floats in `f`, strings in `s`. Arrays: the elements in
  // `ints`, `floats` or `strings` according to array_type.
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;

  bool is_integer() const;  // any integer type or bool (scalar)
  bool is_float() const;    // kFloat32 / kFloat64 (scalar)
  // Number of elements of an array value (0 for scalars).
  size_t array_size() const;
};

// "UINT32", "STRING", "ARRAY[STRING]", ... for error messages.
std::string GgufTypeName(const GgufValue& value);
const char* GgufTypeName(GgufValue::Type type);

// Description of one tensor. dims are GGML order: dims[0] is the innermost
// (contiguous) dimension, i.e. a matrix [rows][cols] has dims = {cols, rows}.
struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;
  DType type = DType::kF32;
  uint64_t offset = 0;         // from the start of the data section
  int64_t num_bytes = 0;       // size of the data, checked against the file
  const void* data = nullptr;  // inside the mapping
  int64_t num_elements() const;
  // Rows of the tensor seen as a matrix [rows][dims[0]] (product of dims[1..]).
  int64_t rows() const;
};

// Hard limits enforced by the reader (GGML's own limits, or sanity bounds).
inline constexpr int kGgufMaxDims = 4;
inline constexpr int64_t kGgufMaxElements = int64_t{1} << 40;
inline constexpr uint32_t kGgufDefaultAlignment = 32;

// An opened GGUF file. Immutable; thread-safe for concurrent reads. The
// mapping lives as long as the object (or any shared_ptr from mapping()).
class GgufFile {
 public:
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(
      const std::string& path);
  // Parses GGUF bytes already in memory (`name` appears in errors). `owner`
  // keeps [data, data + size) alive and becomes mapping(); may be null when
  // the caller guarantees the buffer outlives the object.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBuffer(
      const std::string& name, std::shared_ptr<const void> owner,
      const void* data, uint64_t size);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }

  const GgufValue* Find(std::string_view key) const;
  // Typed accessors; NotFound names the key, InvalidArgument names key and
  // actual type when the value is not convertible.
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  // Array accessors: the value must be an array of strings / integers /
  // floats (integers convert to floats). The pointer lives as long as *this.
  absl::StatusOr<const std::vector<std::string>*> GetStringArray(
      std::string_view key) const;
  absl::StatusOr<const std::vector<int64_t>*> GetIntArray(
      std::string_view key) const;
  absl::StatusOr<std::vector<double>> GetFloatArray(std::string_view key) const;
  const std::map<std::string, GgufValue, std::less<>>& metadata() const {
    return metadata_;
  }

  const GgufTensorInfo* FindTensor(std::string_view name) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // NotFound naming the tensor and the file when absent.
  absl::StatusOr<const GgufTensorInfo*> GetTensor(std::string_view name) const;

  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // data section start
  uint64_t file_size() const { return file_size_; }

  // Keeps the file mapping alive (for WeightViews into tensor data).
  std::shared_ptr<const void> mapping() const { return mapping_; }

 private:
  GgufFile() = default;
  friend class GgufParser;
  std::string path_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  uint64_t file_size_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  std::shared_ptr<const void> mapping_;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_FORMATS_GGUF_H_
