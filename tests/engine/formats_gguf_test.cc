#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/formats/gguf.h"
#include "engine/formats/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/pdserve_formats_",
                      getpid(), "_", name);
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), bytes.size());
}

std::string SmolLm2Path() {
  const char* cache = std::getenv("PDSERVE_CACHE");
  std::string dir =
      cache != nullptr
          ? std::string(cache)
          : absl::StrCat(std::getenv("HOME") ? std::getenv("HOME") : "/root",
                         "/.cache/pdserve");
  return dir + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// A small synthetic GGUF: metadata of every type and three tensors.
GgufWriter SmallWriter() {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetUint8("t.u8", 200);
  w.SetInt8("t.i8", -5);
  w.SetUint16("t.u16", 60000);
  w.SetInt16("t.i16", -30000);
  w.SetUint32("t.u32", 4000000000u);
  w.SetInt32("t.i32", -2000000000);
  w.SetUint64("t.u64", uint64_t{1} << 40);
  w.SetInt64("t.i64", -(int64_t{1} << 50));
  w.SetFloat32("t.f32", 1.5f);
  w.SetFloat64("t.f64", 0.1);
  w.SetBool("t.bool", true);
  w.SetStringArray("t.strs", {"a", "", "hello"});
  w.SetIntArray("t.ints", GgufValue::Type::kInt32, {1, -2, 3});
  w.SetFloat32Array("t.floats", {0.5f, 2.0f});
  std::vector<float> m(4 * 3);
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<float>(i);
  EXPECT_TRUE(w.AddF32Tensor("matrix", {4, 3}, m).ok());
  EXPECT_TRUE(w.AddF32Tensor("vec", {5}, {1, 2, 3, 4, 5}).ok());
  std::string q8(34 * 2, '\0');
  for (size_t i = 0; i < q8.size(); ++i) q8[i] = static_cast<char>(i);
  EXPECT_TRUE(w.AddTensor("q8", DType::kQ8_0, {32, 2}, q8).ok());
  return w;
}

absl::StatusOr<std::unique_ptr<GgufFile>> OpenBytes(const std::string& bytes,
                                                    const std::string& name) {
  const std::string path = TempPath(name);
  WriteBytes(path, bytes);
  auto file = GgufFile::Open(path);
  std::remove(path.c_str());
  return file;
}

// Offset of the tensor info of `name` (its name-length prefix) in `bytes`.
size_t TensorInfoOffset(const std::string& bytes, const std::string& name) {
  std::string needle(8, '\0');
  const uint64_t len = name.size();
  std::memcpy(needle.data(), &len, 8);
  needle += name;
  const size_t pos = bytes.rfind(needle);
  EXPECT_NE(pos, std::string::npos) << name;
  return pos;
}

TEST(GgufTest, WriterRoundTrip) {
  absl::StatusOr<std::string> bytes = SmallWriter().WriteToString();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto file = OpenBytes(*bytes, "roundtrip.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetInt("t.u8"), 200);
  EXPECT_EQ(*f.GetInt("t.i8"), -5);
  EXPECT_EQ(*f.GetInt("t.u16"), 60000);
  EXPECT_EQ(*f.GetInt("t.i16"), -30000);
  EXPECT_EQ(*f.GetInt("t.u32"), 4000000000LL);
  EXPECT_EQ(*f.GetInt("t.i32"), -2000000000);
  EXPECT_EQ(*f.GetInt("t.u64"), int64_t{1} << 40);
  EXPECT_EQ(*f.GetInt("t.i64"), -(int64_t{1} << 50));
  EXPECT_FLOAT_EQ(*f.GetFloat("t.f32"), 1.5f);
  EXPECT_DOUBLE_EQ(*f.GetFloat("t.f64"), 0.1);
  EXPECT_DOUBLE_EQ(*f.GetFloat("t.u32"), 4e9);
  EXPECT_TRUE(*f.GetBool("t.bool"));
  EXPECT_EQ(**f.GetStringArray("t.strs"),
            (std::vector<std::string>{"a", "", "hello"}));
  EXPECT_EQ(**f.GetIntArray("t.ints"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(*f.GetFloatArray("t.floats"), (std::vector<double>{0.5, 2.0}));
  EXPECT_EQ(GgufTypeName(*f.Find("t.strs")), "ARRAY[STRING]");

  ASSERT_EQ(f.tensors().size(), 3u);
  const GgufTensorInfo* m = *f.GetTensor("matrix");
  EXPECT_EQ(m->dims, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(m->rows(), 3);
  EXPECT_EQ(m->num_elements(), 12);
  EXPECT_EQ(m->num_bytes, 48);
  EXPECT_EQ(m->type, DType::kF32);
  EXPECT_EQ(static_cast<const float*>(m->data)[11], 11.0f);
  const GgufTensorInfo* v = *f.GetTensor("vec");
  EXPECT_EQ(v->offset % 32, 0u);
  EXPECT_EQ(static_cast<const float*>(v->data)[4], 5.0f);
  const GgufTensorInfo* q = *f.GetTensor("q8");
  EXPECT_EQ(q->type, DType::kQ8_0);
  EXPECT_EQ(q->num_bytes, 68);
  EXPECT_EQ(static_cast<const uint8_t*>(q->data)[67], 67);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q->data) % 32, 0u);
}

TEST(GgufTest, AccessorErrorsNameKeyAndType) {
  auto file = OpenBytes(*SmallWriter().WriteToString(), "acc.gguf");
  ASSERT_TRUE(file.ok());
  absl::Status s = (*file)->GetInt("no.such.key").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("no.such.key"));
  s = (*file)->GetString("t.u32").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'t.u32' has type UINT32"));
  s = (*file)->GetTensor("missing.weight").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("missing.weight"));
}

TEST(GgufTest, CustomAlignment) {
  GgufWriter w;
  w.set_alignment(64);
  ASSERT_TRUE(w.AddF32Tensor("a", {3}, {1, 2, 3}).ok());
  ASSERT_TRUE(w.AddF32Tensor("b", {2}, {4, 5}).ok());
  auto file = OpenBytes(*w.WriteToString(), "align.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->alignment(), 64u);
  EXPECT_EQ((*file)->data_offset() % 64, 0u);
  EXPECT_EQ((*(*file)->GetTensor("b"))->offset, 64u);
  EXPECT_EQ(static_cast<const float*>((*(*file)->GetTensor("b"))->data)[1],
            5.0f);
}

TEST(GgufTest, WriterRejectsBadTensors) {
  GgufWriter w;
  EXPECT_FALSE(w.AddTensor("q", DType::kQ4_0, {31}, std::string(18, 0)).ok());
  EXPECT_FALSE(w.AddF32Tensor("d", {1, 1, 1, 1, 1}, {1}).ok());
  ASSERT_TRUE(w.AddF32Tensor("x", {2}, {1, 2}).ok());
  EXPECT_FALSE(w.AddF32Tensor("x", {2}, {1, 2}).ok());
  ASSERT_TRUE(w.AddTensor("short", DType::kF32, {4}, std::string(8, 0)).ok());
  absl::Status s = w.WriteToString().status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("'short': 8 bytes given"));
}

// --- Corrupted inputs: each returns the documented error. ---

void ExpectError(const std::string& bytes, const std::string& name,
                 const std::vector<std::string>& parts) {
  auto file = OpenBytes(bytes, name);
  ASSERT_FALSE(file.ok()) << name;
  const std::string msg(file.status().message());
  EXPECT_THAT(msg, HasSubstr(name)) << "names the file";
  for (const std::string& p : parts) EXPECT_THAT(msg, HasSubstr(p));
}

TEST(GgufCorruptTest, TruncatedHeader) {
  std::string bytes = *SmallWriter().WriteToString();
  ExpectError(bytes.substr(0, 10), "trunc_header.gguf",
              {"truncated header", "need 24 bytes", "file size is 10"});
  ExpectError("", "empty.gguf", {"truncated header", "file size is 0"});
}

TEST(GgufCorruptTest, TruncatedMetadataString) {
  std::string bytes = *SmallWriter().WriteToString();
  // Cut in the middle of the "general.architecture" value "llama".
  const size_t at = bytes.find("llama") + 2;
  ExpectError(bytes.substr(0, at), "trunc_string.gguf",
              {"general.architecture", "string length 5", "truncated"});
}

TEST(GgufCorruptTest, HugeStringLength) {
  std::string bytes = *SmallWriter().WriteToString();
  const size_t len_at = bytes.find("llama") - 8;
  const uint64_t huge = uint64_t{1} << 62;
  std::memcpy(bytes.data() + len_at, &huge, 8);
  ExpectError(bytes, "huge_string.gguf",
              {"general.architecture", "string length 4611686018427387904",
               "exceeds the limit"});
  const uint64_t past = 1000;
  std::memcpy(bytes.data() + len_at, &past, 8);
  ExpectError(bytes, "past_string.gguf",
              {"general.architecture", "string length 1000", "exceeds the",
               "bytes left in the file"});
}

TEST(GgufCorruptTest, HugeArrayAndCounts) {
  std::string bytes = *SmallWriter().WriteToString();
  // t.strs array length field: after key, type (9), element type (8).
  const size_t key_at = bytes.find("t.strs");
  const uint64_t huge = uint64_t{1} << 60;
  std::string a = bytes;
  std::memcpy(a.data() + key_at + 6 + 8, &huge, 8);
  ExpectError(a, "huge_array.gguf", {"t.strs", "array of 1152921504606846976"});
  std::string b = bytes;
  std::memcpy(b.data() + 8, &huge, 8);  // tensor count
  ExpectError(b, "huge_tensors.gguf", {"(#3)"});
  std::string c = bytes;
  std::memcpy(c.data() + 16, &huge, 8);  // metadata count
  ExpectError(c, "huge_kv.gguf", {"metadata key #16"});
}

TEST(GgufCorruptTest, WrongMagicAndVersion) {
  std::string bytes = *SmallWriter().WriteToString();
  std::string a = bytes;
  a[0] = 'X';
  ExpectError(a, "magic.gguf", {"wrong magic", "expected 0x46554747"});
  std::string b = bytes;
  const uint32_t v = 7;
  std::memcpy(b.data() + 4, &v, 4);
  auto file = OpenBytes(b, "version.gguf");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(file.status().message()),
              HasSubstr("unsupported GGUF version 7, expected 2 or 3"));
}

TEST(GgufTest, Version2Accepted) {
  std::string bytes = *SmallWriter().WriteToString();
  const uint32_t v2 = 2;
  std::memcpy(bytes.data() + 4, &v2, 4);
  auto file = OpenBytes(bytes, "v2.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->version(), 2u);
  EXPECT_EQ((*file)->tensors().size(), 3u);
}

TEST(GgufCorruptTest, TensorOffsetPastEof) {
  std::string bytes = *SmallWriter().WriteToString();
  // matrix info: name, n_dims(4), dims(2x8), type(4), offset(8).
  const size_t off_at = TensorInfoOffset(bytes, "matrix") + 8 + 6 + 4 + 16 + 4;
  const uint64_t bad = 1 << 20;
  std::memcpy(bytes.data() + off_at, &bad, 8);
  ExpectError(bytes, "offset_eof.gguf",
              {"tensor 'matrix'", "data [1048576", "runs past the end"});
}

TEST(GgufCorruptTest, TruncatedTensorData) {
  std::string bytes = *SmallWriter().WriteToString();
  ExpectError(bytes.substr(0, bytes.size() - 40), "trunc_data.gguf",
              {"tensor 'q8'", "+ 68", "runs past the end"});
}

TEST(GgufCorruptTest, MisalignedOffset) {
  std::string bytes = *SmallWriter().WriteToString();
  const size_t off_at = TensorInfoOffset(bytes, "vec") + 8 + 3 + 4 + 8 + 4;
  uint64_t off;
  std::memcpy(&off, bytes.data() + off_at, 8);
  off += 4;
  std::memcpy(bytes.data() + off_at, &off, 8);
  ExpectError(bytes, "misaligned.gguf",
              {"tensor 'vec'", "not a multiple of the alignment 32"});
}

TEST(GgufCorruptTest, AbsurdDimensions) {
  std::string bytes = *SmallWriter().WriteToString();
  const size_t dims_at = TensorInfoOffset(bytes, "matrix") + 8 + 6 + 4;
  std::string a = bytes;
  const uint64_t big = uint64_t{1} << 30;
  std::memcpy(a.data() + dims_at, &big, 8);
  std::memcpy(a.data() + dims_at + 8, &big, 8);  // 2^60 elements
  ExpectError(a, "absurd_dims.gguf",
              {"tensor 'matrix' (#0)", "absurd dimension 1 = 1073741824"});
  std::string b = bytes;
  const uint32_t n_dims = 9;
  std::memcpy(b.data() + dims_at - 4, &n_dims, 4);
  ExpectError(b, "ndims.gguf", {"tensor 'matrix'", "n_dims is 9"});
}

TEST(GgufCorruptTest, UnknownTensorType) {
  std::string bytes = *SmallWriter().WriteToString();
  const size_t type_at = TensorInfoOffset(bytes, "vec") + 8 + 3 + 4 + 8;
  const uint32_t q6_k = 14;
  std::memcpy(bytes.data() + type_at, &q6_k, 4);
  auto file = OpenBytes(bytes, "type.gguf");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(file.status().message()),
              HasSubstr("tensor 'vec' (#1): unsupported tensor type 14"));
}

TEST(GgufCorruptTest, BlockSizeMismatch) {
  GgufWriter w;
  ASSERT_TRUE(w.AddF32Tensor("x", {64}, std::vector<float>(64)).ok());
  std::string bytes = *w.WriteToString();
  const size_t type_at = TensorInfoOffset(bytes, "x") + 8 + 1 + 4 + 8;
  const uint32_t q8 = 8;
  std::memcpy(bytes.data() + type_at, &q8, 4);
  // 64 Q8_0 values are 68 bytes, which fit; make dims[0] 48 instead.
  const uint64_t d = 48;
  std::memcpy(bytes.data() + type_at - 8, &d, 8);
  ExpectError(bytes, "block.gguf", {"tensor 'x'", "48 values", "Q8_0"});
}

// Truncating at every offset and flipping random bytes must never crash.
// Parses from memory (same parser as Open) so it stays fast; each case gets
// an exactly-sized heap copy so an over-read is caught by ASan.
absl::StatusOr<std::unique_ptr<GgufFile>> ParseCopy(const std::string& b) {
  auto owner = std::shared_ptr<char[]>(new char[b.size() + 1]);
  std::memcpy(owner.get(), b.data(), b.size());
  return GgufFile::FromBuffer("fuzz.gguf", owner, owner.get(), b.size());
}

TEST(GgufFuzzTest, TruncationsAndBitFlipsNeverCrash) {
  const std::string bytes = *SmallWriter().WriteToString();
  int ok = 0;
  for (size_t n = 0; n < bytes.size(); ++n) {
    ok += ParseCopy(bytes.substr(0, n)).ok();
  }
  // Only truncations inside the trailing padding of the last tensor parse.
  EXPECT_LT(ok, 40);
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 5000; ++iter) {
    std::string b = bytes;
    const int flips = 1 + rng() % 4;
    for (int k = 0; k < flips; ++k) {
      b[rng() % b.size()] ^= static_cast<char>(1 << (rng() % 8));
    }
    auto file = ParseCopy(b);
    if (!file.ok()) continue;
    for (const GgufTensorInfo& t : (*file)->tensors()) {
      const uint8_t* p = static_cast<const uint8_t*>(t.data);
      volatile uint8_t sink = p[0] ^ p[t.num_bytes - 1];
      (void)sink;
    }
  }
  // The file path gives the same answers as the buffer path.
  const std::string path = TempPath("fuzz.gguf");
  WriteBytes(path, bytes.substr(0, bytes.size() / 2));
  auto from_file = GgufFile::Open(path);
  std::remove(path.c_str());
  ASSERT_FALSE(from_file.ok());
  EXPECT_THAT(std::string(from_file.status().message()),
              HasSubstr(std::string(ParseCopy(bytes.substr(0, bytes.size() / 2))
                                        .status()
                                        .message()
                                        .substr(9))));  // past "fuzz.gguf"
}

TEST(GgufModelTest, SmolLm2Metadata) {
  const std::string path = SmolLm2Path();
  if (!std::ifstream(path).good()) GTEST_SKIP() << path << " absent";
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetInt("llama.block_count"), 30);
  EXPECT_EQ(*f.GetInt("llama.embedding_length"), 576);
  EXPECT_EQ(*f.GetInt("llama.attention.head_count_kv"), 3);
  EXPECT_FLOAT_EQ(*f.GetFloat("llama.rope.freq_base"), 100000.0f);
  EXPECT_EQ((*f.GetStringArray("tokenizer.ggml.tokens"))->size(), 49152u);
  EXPECT_EQ(f.tensors().size(), 272u);
  const GgufTensorInfo* emb = *f.GetTensor("token_embd.weight");
  EXPECT_EQ(emb->type, DType::kQ8_0);
  EXPECT_EQ(emb->dims, (std::vector<int64_t>{576, 49152}));
  const GgufTensorInfo* q = *f.GetTensor("blk.0.attn_q.weight");
  EXPECT_EQ(q->type, DType::kQ4_1);
  EXPECT_EQ(q->num_bytes, 576 / 32 * 20 * 576);
}

}  // namespace
}  // namespace pdserve
