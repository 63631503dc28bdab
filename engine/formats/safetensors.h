// Reader for Hugging Face safetensors checkpoints: one `.safetensors` file,
// or a model folder (config.json plus `model.safetensors` or shards listed
// in `model.safetensors.index.json`). Files are memory-mapped; every header
// offset and size is checked against the file before use.
#ifndef PDSERVE_ENGINE_FORMATS_SAFETENSORS_H_
#define PDSERVE_ENGINE_FORMATS_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"
#include "nlohmann/json.hpp"

namespace pdserve {

// One tensor of a safetensors file. shape is row-major, outermost first
// (PyTorch order): a matrix [rows][cols] has shape = {rows, cols}.
struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;    // as written in the header: "F32", "I64", ...
  bool supported = false;    // dtype is F32, F16 or BF16
  DType type = DType::kF32;  // valid when supported
  std::vector<int64_t> shape;
  int64_t num_bytes = 0;
  const void* data = nullptr;  // inside the mapping of `file`
  std::string file;            // path of the file holding it
  int64_t num_elements() const;
};

// An opened set of safetensors files. Immutable; thread-safe for reads.
// The mappings live as long as the object (and any copy of mappings()).
class SafetensorsModel {
 public:
  // `path` may be a folder, its config.json, or a single .safetensors file
  // (then config() is empty unless a config.json sits next to it).
  static absl::StatusOr<std::unique_ptr<SafetensorsModel>> Open(
      const std::string& path);
  // Parses one safetensors file already in memory (`name` appears in
  // errors); `owner` keeps the bytes alive (may be null when the caller
  // guarantees the buffer outlives the object). No config.json.
  static absl::StatusOr<std::unique_ptr<SafetensorsModel>> FromBuffer(
      const std::string& name, std::shared_ptr<const void> owner,
      const void* data, uint64_t size);

  const std::string& dir() const { return dir_; }
  // Parsed config.json (a null json when there is none).
  const nlohmann::json& config() const { return config_; }
  // Path of tokenizer.json in the folder, or empty when absent.
  const std::string& tokenizer_json() const { return tokenizer_json_; }

  const SafetensorsTensor* FindTensor(std::string_view name) const;
  // NotFound names the tensor; Unimplemented names tensor and dtype when
  // the dtype is not F32/F16/BF16.
  absl::StatusOr<const SafetensorsTensor*> GetTensor(
      std::string_view name) const;
  const std::map<std::string, SafetensorsTensor, std::less<>>& tensors() const {
    return tensors_;
  }
  const std::vector<std::shared_ptr<const void>>& mappings() const {
    return mappings_;
  }

 private:
  SafetensorsModel() = default;
  absl::Status AddFile(const std::string& path);
  absl::Status AddBuffer(const std::string& path, const uint8_t* data,
                         uint64_t size);
  absl::Status OpenFolder(const std::string& dir);

  std::string dir_;
  nlohmann::json config_;
  std::string tokenizer_json_;
  std::map<std::string, SafetensorsTensor, std::less<>> tensors_;
  std::vector<std::shared_ptr<const void>> mappings_;
};

// Maps a safetensors dtype string to a DType (F32, F16, BF16); Unimplemented
// otherwise.
absl::StatusOr<DType> SafetensorsDType(std::string_view dtype);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_FORMATS_SAFETENSORS_H_
