#include "engine/formats/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/formats/mapped_file.h"

namespace pdserve {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian

using Type = GgufValue::Type;

// Up-front reservations are capped; vectors grow past this only as real
// elements are parsed, so a forged count cannot trigger a huge allocation.
constexpr uint64_t kMaxReserve = uint64_t{1} << 20;
// Longest metadata string accepted (chat templates are kilobytes).
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 28;

std::string Key(std::string_view key) { return std::string(key); }

// Smallest encoded size of one value of `type` (for bounding counts before
// allocating).
uint64_t MinEncodedSize(Type type) {
  switch (type) {
    case Type::kUint8:
    case Type::kInt8:
    case Type::kBool:
      return 1;
    case Type::kUint16:
    case Type::kInt16:
      return 2;
    case Type::kUint32:
    case Type::kInt32:
    case Type::kFloat32:
      return 4;
    case Type::kUint64:
    case Type::kInt64:
    case Type::kFloat64:
      return 8;
    case Type::kString:
      return 8;  // the length prefix
    case Type::kArray:
      return 12;  // element type + count
  }
  return 1;
}

bool IsIntegerType(Type t) {
  switch (t) {
    case Type::kUint8:
    case Type::kInt8:
    case Type::kUint16:
    case Type::kInt16:
    case Type::kUint32:
    case Type::kInt32:
    case Type::kUint64:
    case Type::kInt64:
    case Type::kBool:
      return true;
    default:
      return false;
  }
}

}  // namespace

const char* GgufTypeName(GgufValue::Type type) {
  switch (type) {
    case Type::kUint8:
      return "UINT8";
    case Type::kInt8:
      return "INT8";
    case Type::kUint16:
      return "UINT16";
    case Type::kInt16:
      return "INT16";
    case Type::kUint32:
      return "UINT32";
    case Type::kInt32:
      return "INT32";
    case Type::kFloat32:
      return "FLOAT32";
    case Type::kBool:
      return "BOOL";
    case Type::kString:
      return "STRING";
    case Type::kArray:
      return "ARRAY";
    case Type::kUint64:
      return "UINT64";
    case Type::kInt64:
      return "INT64";
    case Type::kFloat64:
      return "FLOAT64";
  }
  return "UNKNOWN";
}

std::string GgufTypeName(const GgufValue& value) {
  if (value.type != Type::kArray) return GgufTypeName(value.type);
  return absl::StrCat("ARRAY[", GgufTypeName(value.array_type), "]");
}

bool GgufValue::is_integer() const { return IsIntegerType(type); }
bool GgufValue::is_float() const {
  return type == Type::kFloat32 || type == Type::kFloat64;
}
size_t GgufValue::array_size() const {
  if (type != Type::kArray) return 0;
  if (array_type == Type::kString) return strings.size();
  if (array_type == Type::kFloat32 || array_type == Type::kFloat64) {
    return floats.size();
  }
  return ints.size();
}

int64_t GgufTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t GgufTensorInfo::rows() const {
  int64_t n = 1;
  for (size_t i = 1; i < dims.size(); ++i) n *= dims[i];
  return n;
}

// Sequential bounds-checked reader over the mapped file.
class GgufParser {
 public:
  GgufParser(const std::string& path, const uint8_t* data, uint64_t size)
      : path_(path), data_(data), size_(size) {}

  absl::Status Parse(GgufFile& file);

 private:
  absl::Status Error(const std::string& msg) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", msg));
  }
  // Fails unless n more bytes are available; `what` names the item.
  absl::Status Need(uint64_t n, const std::string& what) const {
    if (n > size_ - pos_) {
      return Error(absl::StrCat("truncated ", what, ": need ", n,
                                " bytes at offset ", pos_, ", file size is ",
                                size_, " (", size_ - pos_, " left)"));
    }
    return absl::OkStatus();
  }
  template <typename T>
  absl::StatusOr<T> Read(const std::string& what) {
    if (absl::Status s = Need(sizeof(T), what); !s.ok()) return s;
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <typename T>
  absl::StatusOr<int64_t> ReadAs(const std::string& what) {
    absl::StatusOr<T> v = Read<T>(what);
    if (!v.ok()) return v.status();
    return static_cast<int64_t>(*v);
  }
  absl::StatusOr<std::string> ReadString(const std::string& what);
  absl::StatusOr<int64_t> ReadInt(Type type, const std::string& what);
  absl::Status ReadScalar(Type type, const std::string& what, GgufValue& v);
  absl::Status ReadArray(const std::string& key, GgufValue& v);
  absl::Status ReadMetadata(GgufFile& file, uint64_t count);
  absl::Status ReadTensorInfo(GgufFile& file, uint64_t index);
  absl::Status PlaceTensors(GgufFile& file);

  const std::string& path_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

absl::StatusOr<std::string> GgufParser::ReadString(const std::string& what) {
  absl::StatusOr<uint64_t> len = Read<uint64_t>(absl::StrCat(what, " length"));
  if (!len.ok()) return len.status();
  if (*len > kMaxStringBytes) {
    return Error(absl::StrCat(what, ": string length ", *len, " at offset ",
                              pos_ - 8, " exceeds the limit of ",
                              kMaxStringBytes, " bytes"));
  }
  if (*len > size_ - pos_) {
    return Error(absl::StrCat("truncated ", what, ": string length ", *len,
                              " at offset ", pos_ - 8, " exceeds the ",
                              size_ - pos_, " bytes left in the file (size ",
                              size_, ")"));
  }
  std::string s(reinterpret_cast<const char*>(data_ + pos_), *len);
  pos_ += *len;
  return s;
}

absl::StatusOr<int64_t> GgufParser::ReadInt(Type type,
                                            const std::string& what) {
  switch (type) {
    case Type::kUint8:
      return ReadAs<uint8_t>(what);
    case Type::kInt8:
      return ReadAs<int8_t>(what);
    case Type::kBool: {
      absl::StatusOr<int64_t> b = ReadAs<uint8_t>(what);
      if (!b.ok()) return b.status();
      return *b != 0 ? 1 : 0;
    }
    case Type::kUint16:
      return ReadAs<uint16_t>(what);
    case Type::kInt16:
      return ReadAs<int16_t>(what);
    case Type::kUint32:
      return ReadAs<uint32_t>(what);
    case Type::kInt32:
      return ReadAs<int32_t>(what);
    case Type::kInt64:
      return ReadAs<int64_t>(what);
    case Type::kUint64: {
      auto v = Read<uint64_t>(what);
      if (!v.ok()) return v.status();
      if (*v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(absl::StrCat(what, ": UINT64 value ", *v,
                                  " exceeds the supported maximum ",
                                  std::numeric_limits<int64_t>::max()));
      }
      return static_cast<int64_t>(*v);
    }
    default:
      return Error(absl::StrCat(what, ": ", GgufTypeName(type),
                                " is not an integer type"));
  }
}

absl::Status GgufParser::ReadScalar(Type type, const std::string& what,
                                    GgufValue& v) {
  v.type = type;
  if (type == Type::kString) {
    absl::StatusOr<std::string> s = ReadString(what);
    if (!s.ok()) return s.status();
    v.s = std::move(*s);
  } else if (type == Type::kFloat32) {
    absl::StatusOr<float> f = Read<float>(what);
    if (!f.ok()) return f.status();
    v.f = *f;
  } else if (type == Type::kFloat64) {
    absl::StatusOr<double> f = Read<double>(what);
    if (!f.ok()) return f.status();
    v.f = *f;
  } else {
    absl::StatusOr<int64_t> i = ReadInt(type, what);
    if (!i.ok()) return i.status();
    v.i = *i;
  }
  return absl::OkStatus();
}

absl::Status GgufParser::ReadArray(const std::string& key, GgufValue& v) {
  const std::string what = absl::StrCat("metadata key '", key, "'");
  absl::StatusOr<uint32_t> et = Read<uint32_t>(what + " array type");
  if (!et.ok()) return et.status();
  if (*et > static_cast<uint32_t>(Type::kFloat64) ||
      *et == static_cast<uint32_t>(Type::kArray)) {
    return Error(absl::StrCat(what, ": unsupported array element type ", *et,
                              " (expected 0..12, nested arrays unsupported)"));
  }
  v.type = Type::kArray;
  v.array_type = static_cast<Type>(*et);
  absl::StatusOr<uint64_t> n = Read<uint64_t>(what + " array length");
  if (!n.ok()) return n.status();
  const uint64_t min_size = MinEncodedSize(v.array_type);
  if (*n > (size_ - pos_) / min_size) {
    return Error(absl::StrCat("truncated ", what, ": array of ", *n, " ",
                              GgufTypeName(v.array_type), " needs at least ",
                              min_size, " bytes each but ", size_ - pos_,
                              " bytes are left (file size ", size_, ")"));
  }
  GgufValue elem;
  for (uint64_t k = 0; k < *n; ++k) {
    if (absl::Status s =
            ReadScalar(v.array_type, absl::StrCat(what, " element ", k), elem);
        !s.ok()) {
      return s;
    }
    if (v.array_type == Type::kString) {
      if (v.strings.empty())
        v.strings.reserve(std::min<uint64_t>(*n, kMaxReserve));
      v.strings.push_back(std::move(elem.s));
    } else if (elem.is_float()) {
      if (v.floats.empty())
        v.floats.reserve(std::min<uint64_t>(*n, kMaxReserve));
      v.floats.push_back(elem.f);
    } else {
      if (v.ints.empty()) v.ints.reserve(std::min<uint64_t>(*n, kMaxReserve));
      v.ints.push_back(elem.i);
    }
  }
  return absl::OkStatus();
}

absl::Status GgufParser::ReadMetadata(GgufFile& file, uint64_t count) {
  // No allocation depends on `count`; each entry consumes >= 13 bytes or
  // fails, so a huge count ends in a truncation error.
  for (uint64_t k = 0; k < count; ++k) {
    absl::StatusOr<std::string> key =
        ReadString(absl::StrCat("metadata key #", k));
    if (!key.ok()) return key.status();
    const std::string what = absl::StrCat("metadata key '", *key, "'");
    absl::StatusOr<uint32_t> type = Read<uint32_t>(what + " type");
    if (!type.ok()) return type.status();
    if (*type > static_cast<uint32_t>(Type::kFloat64)) {
      return Error(absl::StrCat(what, ": unknown value type ", *type,
                                " (expected 0..12)"));
    }
    GgufValue v;
    absl::Status s = static_cast<Type>(*type) == Type::kArray
                         ? ReadArray(*key, v)
                         : ReadScalar(static_cast<Type>(*type), what, v);
    if (!s.ok()) return s;
    if (!file.metadata_.emplace(*key, std::move(v)).second) {
      return Error(absl::StrCat(what, " appears twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status GgufParser::ReadTensorInfo(GgufFile& file, uint64_t index) {
  GgufTensorInfo t;
  absl::StatusOr<std::string> name =
      ReadString(absl::StrCat("tensor #", index, " name"));
  if (!name.ok()) return name.status();
  t.name = std::move(*name);
  const std::string what = absl::StrCat("tensor '", t.name, "' (#", index, ")");
  absl::StatusOr<uint32_t> n_dims = Read<uint32_t>(what + " n_dims");
  if (!n_dims.ok()) return n_dims.status();
  if (*n_dims < 1 || *n_dims > kGgufMaxDims) {
    return Error(absl::StrCat(what, ": n_dims is ", *n_dims, ", expected 1..",
                              kGgufMaxDims));
  }
  int64_t elements = 1;
  for (uint32_t d = 0; d < *n_dims; ++d) {
    absl::StatusOr<uint64_t> dim = Read<uint64_t>(what + " dims");
    if (!dim.ok()) return dim.status();
    if (*dim < 1 || *dim > static_cast<uint64_t>(kGgufMaxElements) ||
        elements > kGgufMaxElements / static_cast<int64_t>(*dim)) {
      return Error(absl::StrCat(what, ": absurd dimension ", d, " = ", *dim,
                                " (element count must be 1..", kGgufMaxElements,
                                ")"));
    }
    elements *= static_cast<int64_t>(*dim);
    t.dims.push_back(static_cast<int64_t>(*dim));
  }
  absl::StatusOr<uint32_t> type_id = Read<uint32_t>(what + " type");
  if (!type_id.ok()) return type_id.status();
  absl::StatusOr<DType> type = DTypeFromGgmlId(*type_id);
  if (!type.ok()) {
    return absl::UnimplementedError(
        absl::StrCat(path_, ": ", what, ": unsupported tensor type ", *type_id,
                     ": ", type.status().message()));
  }
  t.type = *type;
  absl::StatusOr<uint64_t> offset = Read<uint64_t>(what + " offset");
  if (!offset.ok()) return offset.status();
  t.offset = *offset;
  absl::StatusOr<int64_t> row_bytes = RowBytes(t.type, t.dims[0]);
  if (!row_bytes.ok()) {
    return Error(absl::StrCat(what, ": ", row_bytes.status().message()));
  }
  // Both factors are <= 2^40 elements, so bytes fit easily in int64.
  t.num_bytes = *row_bytes * t.rows();
  if (!file.tensor_index_.emplace(t.name, file.tensors_.size()).second) {
    return Error(absl::StrCat(what, " appears twice"));
  }
  file.tensors_.push_back(std::move(t));
  return absl::OkStatus();
}

absl::Status GgufParser::PlaceTensors(GgufFile& file) {
  const uint64_t align = file.alignment_;
  const uint64_t data_offset = (pos_ + align - 1) / align * align;
  file.data_offset_ = data_offset;
  if (file.tensors_.empty()) return absl::OkStatus();
  if (data_offset > size_) {
    return Error(absl::StrCat("truncated: data section starts at offset ",
                              data_offset, " but the file size is ", size_));
  }
  const uint64_t data_size = size_ - data_offset;
  for (GgufTensorInfo& t : file.tensors_) {
    if (t.offset % align != 0) {
      return Error(absl::StrCat("tensor '", t.name, "': data offset ", t.offset,
                                " is not a multiple of the ", "alignment ",
                                align));
    }
    const uint64_t bytes = static_cast<uint64_t>(t.num_bytes);
    if (t.offset > data_size || bytes > data_size - t.offset) {
      return Error(absl::StrCat(
          "tensor '", t.name, "': data [", t.offset, ", ", t.offset, " + ",
          bytes, ") (", DTypeName(t.type), ") runs past the end of ",
          "the data section (", data_size, " bytes from file offset ",
          data_offset, "; file size ", size_, ")"));
    }
    t.data = data_ + data_offset + t.offset;
  }
  return absl::OkStatus();
}

absl::Status GgufParser::Parse(GgufFile& file) {
  if (size_ < 24) {
    return Error(
        absl::StrCat("truncated header: need 24 bytes, file size is ", size_));
  }
  const uint32_t magic = *Read<uint32_t>("magic");
  if (magic != kGgufMagic) {
    return Error(
        absl::StrCat("not a GGUF file: wrong magic 0x",
                     absl::Hex(magic, absl::kZeroPad8), ", expected 0x",
                     absl::Hex(kGgufMagic, absl::kZeroPad8), " (\"GGUF\")"));
  }
  file.version_ = *Read<uint32_t>("version");
  if (file.version_ != 2 && file.version_ != 3) {
    return absl::UnimplementedError(
        absl::StrCat(path_, ": unsupported GGUF version ", file.version_,
                     ", expected 2 or 3"));
  }
  const uint64_t n_tensors = *Read<uint64_t>("tensor count");
  const uint64_t n_kv = *Read<uint64_t>("metadata count");
  if (absl::Status s = ReadMetadata(file, n_kv); !s.ok()) return s;
  if (const GgufValue* a = file.Find("general.alignment")) {
    if (!a->is_integer() || a->i <= 0 || a->i > (1 << 30) ||
        (a->i & (a->i - 1)) != 0) {
      return Error(absl::StrCat("general.alignment must be a power of two ",
                                "integer in 1..2^30, found ", GgufTypeName(*a),
                                " ", a->i));
    }
    file.alignment_ = static_cast<uint32_t>(a->i);
  }
  // Each tensor info takes at least 8 (name) + 4 + 8 (one dim) + 4 + 8
  // bytes; bound the reservation by what the file can hold.
  file.tensors_.reserve(std::min<uint64_t>(n_tensors, kMaxReserve / 16));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    if (absl::Status s = ReadTensorInfo(file, k); !s.ok()) return s;
  }
  return PlaceTensors(file);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(
    const std::string& path) {
  absl::StatusOr<MappedFile> mapped = MapFile(path);
  if (!mapped.ok()) return mapped.status();
  return FromBuffer(path, mapped->owner, mapped->data, mapped->size);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBuffer(
    const std::string& name, std::shared_ptr<const void> owner,
    const void* data, uint64_t size) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = name;
  file->file_size_ = size;
  file->mapping_ = std::move(owner);
  GgufParser parser(name, static_cast<const uint8_t*>(data), size);
  if (absl::Status s = parser.Parse(*file); !s.ok()) return s;
  return file;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {

absl::Status NotFound(const std::string& path, std::string_view key) {
  return absl::NotFoundError(
      absl::StrCat(path, ": metadata key '", Key(key), "' not found"));
}

absl::Status WrongType(const std::string& path, std::string_view key,
                       const GgufValue& v, const char* expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": metadata key '", Key(key), "' has type ",
                   GgufTypeName(v), ", expected ", expected));
}

}  // namespace

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(path_, key);
  if (!v->is_integer()) return WrongType(path_, key, *v, "an integer");
  return v->i;
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(path_, key);
  if (v->is_float()) return v->f;
  if (v->is_integer() && v->type != Type::kBool) {
    return static_cast<double>(v->i);
  }
  return WrongType(path_, key, *v, "a number");
}

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(path_, key);
  if (v->type != Type::kString) return WrongType(path_, key, *v, "STRING");
  return v->s;
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(path_, key);
  if (v->type != Type::kBool) return WrongType(path_, key, *v, "BOOL");
  return v->i != 0;
}

absl::StatusOr<const std::vector<std::string>*> GgufFile::GetStringArray(
    std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(path_, key);
  if (v->type != Type::kArray || v->array_type != Type::kString) {
    return WrongType(path_, key, *v, "ARRAY[STRING]");
  }
  return &v->strings;
}

absl::StatusOr<const std::vector<int64_t>*> GgufFile::GetIntArray(
    std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(path_, key);
  if (v->type != Type::kArray || !IsIntegerType(v->array_type)) {
    return WrongType(path_, key, *v, "an integer array");
  }
  return &v->ints;
}

absl::StatusOr<std::vector<double>> GgufFile::GetFloatArray(
    std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(path_, key);
  if (v->type == Type::kArray &&
      (v->array_type == Type::kFloat32 || v->array_type == Type::kFloat64)) {
    return v->floats;
  }
  if (v->type == Type::kArray && IsIntegerType(v->array_type)) {
    return std::vector<double>(v->ints.begin(), v->ints.end());
  }
  return WrongType(path_, key, *v, "a numeric array");
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<const GgufTensorInfo*> GgufFile::GetTensor(
    std::string_view name) const {
  const GgufTensorInfo* t = FindTensor(name);
  if (t == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(path_, ": tensor '", Key(name), "' not found"));
  }
  return t;
}

}  // namespace pdserve
