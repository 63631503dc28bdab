#include "engine/formats/safetensors.h"

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/formats/mapped_file.h"

namespace pdserve {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxElements = int64_t{1} << 40;
// The safetensors specification caps the header at 100 MB.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Bytes per element of the dtypes the safetensors format defines (0 when the
// string is not one of them).
int64_t ElementSize(const std::string& dtype) {
  static const std::map<std::string, int64_t, std::less<>> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

bool IsDir(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

absl::StatusOr<json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream buf;
  buf << in.rdbuf();
  try {
    return json::parse(buf.str());
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": bad JSON: ", e.what()));
  }
}

// Reads a non-negative integer JSON value.
bool GetCount(const json& j, int64_t& out) {
  if (j.is_number_unsigned()) {
    if (j.get<uint64_t>() > static_cast<uint64_t>(kMaxElements) * 8) {
      return false;
    }
    out = static_cast<int64_t>(j.get<uint64_t>());
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    out = j.get<int64_t>();
    return out <= kMaxElements * 8;
  }
  return false;
}

// Validates one header entry and fills `t` (everything except data/file).
absl::Status ParseEntry(const std::string& path, const std::string& name,
                        const json& entry, uint64_t data_size,
                        SafetensorsTensor& t, int64_t& begin) {
  const std::string what = absl::StrCat(path, ": tensor '", name, "'");
  if (!entry.is_object() || !entry.contains("dtype") ||
      !entry["dtype"].is_string() || !entry.contains("shape") ||
      !entry["shape"].is_array() || !entry.contains("data_offsets") ||
      !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": header entry must be {\"dtype\": str, \"shape\": [ints], ",
        "\"data_offsets\": [begin, end]}, found ", entry.dump()));
  }
  t.name = name;
  t.dtype_name = entry["dtype"].get<std::string>();
  int64_t elements = 1;
  for (const json& d : entry["shape"]) {
    int64_t dim;
    if (!GetCount(d, dim) || (dim > 0 && elements > kMaxElements / dim)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": absurd shape ", entry["shape"].dump(),
                       " (at most ", kMaxElements, " elements)"));
    }
    elements *= dim;
    t.shape.push_back(dim);
  }
  int64_t end;
  if (!GetCount(entry["data_offsets"][0], begin) ||
      !GetCount(entry["data_offsets"][1], end) || begin > end ||
      static_cast<uint64_t>(end) > data_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": data_offsets ", entry["data_offsets"].dump(),
        " are not a range within the ", data_size, "-byte data section"));
  }
  t.num_bytes = end - begin;
  const int64_t esize = ElementSize(t.dtype_name);
  if (esize != 0 && t.num_bytes != elements * esize) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": data_offsets ", entry["data_offsets"].dump(), " hold ",
        t.num_bytes, " bytes but dtype ", t.dtype_name, " shape ",
        entry["shape"].dump(), " needs ", elements * esize));
  }
  absl::StatusOr<DType> type = SafetensorsDType(t.dtype_name);
  t.supported = type.ok();
  if (type.ok()) t.type = *type;
  return absl::OkStatus();
}

}  // namespace

int64_t SafetensorsTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<DType> SafetensorsDType(std::string_view dtype) {
  if (dtype == "F32") return DType::kF32;
  if (dtype == "F16") return DType::kF16;
  if (dtype == "BF16") return DType::kBF16;
  return absl::UnimplementedError(
      absl::StrCat("safetensors dtype ", std::string(dtype),
                   " is not supported (supported: F32, F16, BF16)"));
}

absl::Status SafetensorsModel::AddFile(const std::string& path) {
  absl::StatusOr<MappedFile> file = MapFile(path);
  if (!file.ok()) return file.status();
  if (absl::Status s = AddBuffer(path, file->data, file->size); !s.ok()) {
    return s;
  }
  mappings_.push_back(file->owner);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SafetensorsModel>> SafetensorsModel::FromBuffer(
    const std::string& name, std::shared_ptr<const void> owner,
    const void* data, uint64_t size) {
  std::unique_ptr<SafetensorsModel> model(new SafetensorsModel());
  absl::Status s =
      model->AddBuffer(name, static_cast<const uint8_t*>(data), size);
  if (!s.ok()) return s;
  if (owner != nullptr) model->mappings_.push_back(std::move(owner));
  return model;
}

absl::Status SafetensorsModel::AddBuffer(const std::string& path,
                                         const uint8_t* data, uint64_t size) {
  if (size < 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": truncated: need an 8-byte header length, file size is ",
        size));
  }
  uint64_t header_len;
  std::memcpy(&header_len, data, 8);
  if (header_len > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": header length ", header_len,
                     " exceeds the format's limit of ", kMaxHeaderBytes));
  }
  if (header_len > size - 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": header length ", header_len, " runs past the end of the ",
        "file (", size, " bytes, ", size - 8, " after the length field)"));
  }
  json header;
  try {
    header = json::parse(data + 8, data + 8 + header_len);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": bad header JSON: ", e.what()));
  }
  if (!header.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": header JSON must be an object, found ", header.type_name()));
  }
  const uint64_t data_start = 8 + header_len;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    SafetensorsTensor t;
    int64_t begin = 0;
    absl::Status s = ParseEntry(path, name, entry, size - data_start, t, begin);
    if (!s.ok()) return s;
    t.data = data + data_start + begin;
    t.file = path;
    if (tensors_.count(name) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor '", name, "' also appears in ", tensors_[name].file));
    }
    tensors_.emplace(name, std::move(t));
  }
  return absl::OkStatus();
}

absl::Status SafetensorsModel::OpenFolder(const std::string& dir) {
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (!IsFile(index_path)) {
    const std::string single = dir + "/model.safetensors";
    if (!IsFile(single)) {
      return absl::NotFoundError(absl::StrCat(
          dir, ": no model.safetensors or model.safetensors.index.json"));
    }
    return AddFile(single);
  }
  absl::StatusOr<json> index = ReadJsonFile(index_path);
  if (!index.ok()) return index.status();
  if (!index->is_object() || !index->contains("weight_map") ||
      !(*index)["weight_map"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": expected an object with \"weight_map\""));
  }
  const json& map = (*index)["weight_map"];
  std::set<std::string> shards;
  for (const auto& [name, shard] : map.items()) {
    if (!shard.is_string() || shard.get<std::string>().empty() ||
        shard.get<std::string>().find('/') != std::string::npos ||
        shard.get<std::string>() == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": tensor '", name,
                       "' maps to an invalid shard name ", shard.dump()));
    }
    shards.insert(shard.get<std::string>());
  }
  for (const std::string& shard : shards) {
    if (absl::Status s = AddFile(dir + "/" + shard); !s.ok()) return s;
  }
  for (const auto& [name, shard] : map.items()) {
    auto it = tensors_.find(name);
    const std::string expected = dir + "/" + shard.get<std::string>();
    if (it == tensors_.end() || it->second.file != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": tensor '", name, "' is listed in ",
                       expected, " but not stored there"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SafetensorsModel>> SafetensorsModel::Open(
    const std::string& path) {
  std::unique_ptr<SafetensorsModel> model(new SafetensorsModel());
  absl::Status s;
  if (IsDir(path)) {
    model->dir_ = path;
    s = model->OpenFolder(path);
  } else if (EndsWith(path, ".safetensors")) {
    model->dir_ = Parent(path);
    s = model->AddFile(path);
  } else if (EndsWith(path, "config.json")) {
    model->dir_ = Parent(path);
    s = model->OpenFolder(model->dir_);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": expected a folder, config.json or a .safetensors file"));
  }
  if (!s.ok()) return s;
  const std::string config = model->dir_ + "/config.json";
  if (IsFile(config)) {
    absl::StatusOr<json> j = ReadJsonFile(config);
    if (!j.ok()) return j.status();
    model->config_ = std::move(*j);
  }
  if (IsFile(model->dir_ + "/tokenizer.json")) {
    model->tokenizer_json_ = model->dir_ + "/tokenizer.json";
  }
  return model;
}

const SafetensorsTensor* SafetensorsModel::FindTensor(
    std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::StatusOr<const SafetensorsTensor*> SafetensorsModel::GetTensor(
    std::string_view name) const {
  const SafetensorsTensor* t = FindTensor(name);
  if (t == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(dir_, ": tensor '", std::string(name), "' not found in ",
                     tensors_.size(), " safetensors tensors"));
  }
  if (!t->supported) {
    return absl::UnimplementedError(
        absl::StrCat(t->file, ": tensor '", t->name, "' has dtype ",
                     t->dtype_name, "; supported: F32, F16, BF16"));
  }
  return t;
}

}  // namespace pdserve
