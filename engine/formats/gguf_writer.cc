#include "engine/formats/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pdserve {
namespace {

using Type = GgufValue::Type;

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void PutString(std::string& out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out.append(s);
}

void PutInt(std::string& out, Type type, int64_t v) {
  switch (type) {
    case Type::kUint8:
    case Type::kBool:
      Put<uint8_t>(out, v);
      break;
    case Type::kInt8:
      Put<int8_t>(out, v);
      break;
    case Type::kUint16:
      Put<uint16_t>(out, v);
      break;
    case Type::kInt16:
      Put<int16_t>(out, v);
      break;
    case Type::kUint32:
      Put<uint32_t>(out, v);
      break;
    case Type::kInt32:
      Put<int32_t>(out, v);
      break;
    case Type::kUint64:
      Put<uint64_t>(out, v);
      break;
    default:
      Put<int64_t>(out, v);
      break;
  }
}

void PutScalar(std::string& out, Type type, int64_t i, double f,
               const std::string& s) {
  if (type == Type::kString) {
    PutString(out, s);
  } else if (type == Type::kFloat32) {
    Put<float>(out, static_cast<float>(f));
  } else if (type == Type::kFloat64) {
    Put<double>(out, f);
  } else {
    PutInt(out, type, i);
  }
}

void PutValue(std::string& out, const GgufValue& v) {
  Put<uint32_t>(out, static_cast<uint32_t>(v.type));
  if (v.type != Type::kArray) {
    PutScalar(out, v.type, v.i, v.f, v.s);
    return;
  }
  Put<uint32_t>(out, static_cast<uint32_t>(v.array_type));
  Put<uint64_t>(out, v.array_size());
  static const std::string kEmpty;
  for (size_t k = 0; k < v.array_size(); ++k) {
    if (v.array_type == Type::kString) {
      PutString(out, v.strings[k]);
    } else if (v.array_type == Type::kFloat32 ||
               v.array_type == Type::kFloat64) {
      PutScalar(out, v.array_type, 0, v.floats[k], kEmpty);
    } else {
      PutInt(out, v.array_type, v.ints[k]);
    }
  }
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

GgufValue Scalar(Type type, int64_t i) {
  GgufValue v;
  v.type = type;
  v.i = i;
  return v;
}

GgufValue FloatScalar(Type type, double f) {
  GgufValue v;
  v.type = type;
  v.f = f;
  return v;
}

}  // namespace

void GgufWriter::set_alignment(uint32_t alignment) {
  alignment_ = alignment;
  if (alignment != kGgufDefaultAlignment) {
    SetUint32("general.alignment", alignment);
  }
}

void GgufWriter::SetValue(const std::string& key, GgufValue value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::SetUint8(const std::string& k, uint8_t v) {
  SetValue(k, Scalar(Type::kUint8, v));
}
void GgufWriter::SetInt8(const std::string& k, int8_t v) {
  SetValue(k, Scalar(Type::kInt8, v));
}
void GgufWriter::SetUint16(const std::string& k, uint16_t v) {
  SetValue(k, Scalar(Type::kUint16, v));
}
void GgufWriter::SetInt16(const std::string& k, int16_t v) {
  SetValue(k, Scalar(Type::kInt16, v));
}
void GgufWriter::SetUint32(const std::string& k, uint32_t v) {
  SetValue(k, Scalar(Type::kUint32, v));
}
void GgufWriter::SetInt32(const std::string& k, int32_t v) {
  SetValue(k, Scalar(Type::kInt32, v));
}
void GgufWriter::SetUint64(const std::string& k, uint64_t v) {
  SetValue(k, Scalar(Type::kUint64, static_cast<int64_t>(v)));
}
void GgufWriter::SetInt64(const std::string& k, int64_t v) {
  SetValue(k, Scalar(Type::kInt64, v));
}
void GgufWriter::SetBool(const std::string& k, bool v) {
  SetValue(k, Scalar(Type::kBool, v ? 1 : 0));
}
void GgufWriter::SetFloat32(const std::string& k, float v) {
  SetValue(k, FloatScalar(Type::kFloat32, v));
}
void GgufWriter::SetFloat64(const std::string& k, double v) {
  SetValue(k, FloatScalar(Type::kFloat64, v));
}

void GgufWriter::SetString(const std::string& key, const std::string& s) {
  GgufValue v;
  v.type = Type::kString;
  v.s = s;
  SetValue(key, std::move(v));
}

void GgufWriter::SetStringArray(const std::string& key,
                                const std::vector<std::string>& s) {
  GgufValue v;
  v.type = Type::kArray;
  v.array_type = Type::kString;
  v.strings = s;
  SetValue(key, std::move(v));
}

void GgufWriter::SetIntArray(const std::string& key, GgufValue::Type type,
                             const std::vector<int64_t>& ints) {
  GgufValue v;
  v.type = Type::kArray;
  v.array_type = type;
  v.ints = ints;
  SetValue(key, std::move(v));
}

void GgufWriter::SetFloat32Array(const std::string& key,
                                 const std::vector<float>& f) {
  GgufValue v;
  v.type = Type::kArray;
  v.array_type = Type::kFloat32;
  v.floats.assign(f.begin(), f.end());
  SetValue(key, std::move(v));
}

absl::Status GgufWriter::AddTensor(const std::string& name, DType type,
                                   std::vector<int64_t> dims, FillFn fill) {
  for (const Tensor& t : tensors_) {
    if (t.name == name) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' added twice"));
    }
  }
  if (dims.empty() || dims.size() > kGgufMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': ", dims.size(),
                     " dims, expected 1..", kGgufMaxDims));
  }
  int64_t rows = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 1 || dims[i] > kGgufMaxElements) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': dimension ", i, " = ", dims[i]));
    }
    if (i > 0) rows *= dims[i];
  }
  absl::StatusOr<int64_t> row_bytes = RowBytes(type, dims[0]);
  if (!row_bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': ", row_bytes.status().message()));
  }
  tensors_.push_back(
      {name, type, std::move(dims), *row_bytes * rows, std::move(fill)});
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensor(const std::string& name, DType type,
                                   std::vector<int64_t> dims,
                                   std::string bytes) {
  auto shared = std::make_shared<std::string>(std::move(bytes));
  const std::string tensor_name = name;
  return AddTensor(
      name, type, std::move(dims),
      [shared, tensor_name](uint8_t* dst, int64_t n) -> absl::Status {
        if (static_cast<int64_t>(shared->size()) != n) {
          return absl::InvalidArgumentError(
              absl::StrCat("tensor '", tensor_name, "': ", shared->size(),
                           " bytes given, its type and dims need ", n));
        }
        std::memcpy(dst, shared->data(), n);
        return absl::OkStatus();
      });
}

absl::Status GgufWriter::AddF32Tensor(const std::string& name,
                                      std::vector<int64_t> dims,
                                      const std::vector<float>& values) {
  std::string bytes(reinterpret_cast<const char*>(values.data()),
                    values.size() * sizeof(float));
  return AddTensor(name, DType::kF32, std::move(dims), std::move(bytes));
}

absl::Status GgufWriter::Write(
    const std::function<absl::Status(const void*, size_t)>& sink) const {
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("alignment ", alignment_, " is not a power of two"));
  }
  std::string head;
  Put<uint32_t>(head, 0x46554747);  // "GGUF"
  Put<uint32_t>(head, 3);
  Put<uint64_t>(head, tensors_.size());
  Put<uint64_t>(head, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    PutString(head, key);
    PutValue(head, value);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    PutString(head, t.name);
    Put<uint32_t>(head, t.dims.size());
    for (int64_t d : t.dims) Put<uint64_t>(head, d);
    Put<uint32_t>(head, static_cast<uint32_t>(t.type));
    Put<uint64_t>(head, offset);
    offset = AlignUp(offset + t.num_bytes, alignment_);
  }
  head.resize(AlignUp(head.size(), alignment_), '\0');
  if (absl::Status s = sink(head.data(), head.size()); !s.ok()) return s;
  std::vector<uint8_t> buffer;
  for (const Tensor& t : tensors_) {
    const uint64_t padded = AlignUp(t.num_bytes, alignment_);
    buffer.assign(padded, 0);
    if (absl::Status s = t.fill(buffer.data(), t.num_bytes); !s.ok()) {
      return s;
    }
    if (absl::Status s = sink(buffer.data(), padded); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> GgufWriter::WriteToString() const {
  std::string out;
  absl::Status s = Write([&out](const void* p, size_t n) {
    out.append(static_cast<const char*>(p), n);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(tmp, ": cannot open for writing: ", strerror(errno)));
  }
  absl::Status s = Write([f, &tmp](const void* p, size_t n) {
    if (std::fwrite(p, 1, n, f) != n) {
      return absl::InternalError(absl::StrCat(
          tmp, ": write of ", n, " bytes failed: ", strerror(errno)));
    }
    return absl::OkStatus();
  });
  if (std::fclose(f) != 0 && s.ok()) {
    s = absl::InternalError(
        absl::StrCat(tmp, ": close failed: ", strerror(errno)));
  }
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    s = absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path,
                                         ": ", strerror(errno)));
  }
  if (!s.ok()) std::remove(tmp.c_str());
  return s;
}

}  // namespace pdserve
