#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/formats/gguf_requantize.h"
#include "engine/loader/model_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/formats_test_util.h"

namespace pdserve {
namespace {

using testing_util::TempDir;
using testing_util::TinySpec;

std::vector<float> Dequantized(const GgufTensorInfo& t) {
  std::vector<float> out(t.num_elements());
  const int64_t row_bytes = *RowBytes(t.type, t.dims[0]);
  for (int64_t r = 0; r < t.rows(); ++r) {
    DequantizeRow(t.type, static_cast<const uint8_t*>(t.data) + r * row_bytes,
                  out.data() + r * t.dims[0], t.dims[0]);
  }
  return out;
}

TEST(RequantizeTest, ParseDTypeName) {
  EXPECT_EQ(*ParseDTypeName("q8_0"), DType::kQ8_0);
  EXPECT_EQ(*ParseDTypeName("BF16"), DType::kBF16);
  EXPECT_FALSE(ParseDTypeName("Q6_K").ok());
}

TEST(RequantizeTest, AllTargetsRoundTrip) {
  TempDir dir("requant");
  TinySpec s;
  GgufWriter w = testing_util::TinyGguf(s, DType::kF32, DType::kF16);
  // A matrix whose rows are not whole 32-value blocks.
  ASSERT_TRUE(
      w.AddF32Tensor("odd.weight", {24, 2}, std::vector<float>(48, 0.25f))
          .ok());
  const std::string in_path = dir.Path("in.gguf");
  ASSERT_TRUE(w.WriteFile(in_path).ok());
  auto in = GgufFile::Open(in_path);
  ASSERT_TRUE(in.ok()) << in.status();

  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kF16,
                     DType::kBF16, DType::kF32}) {
    const std::string out_path =
        dir.Path(std::string(DTypeName(type)) + ".gguf");
    auto stats = RequantizeGguf(**in, type, out_path);
    ASSERT_TRUE(stats.ok()) << stats.status();
    auto out = GgufFile::Open(out_path);
    ASSERT_TRUE(out.ok()) << out.status();
    const bool quant = DTypeBlockValues(type) > 1;
    EXPECT_EQ(stats->fallback_f16, quant ? 1 : 0);
    EXPECT_EQ(stats->vectors, 1 + 2 * s.layers);  // norms
    EXPECT_EQ(*(*out)->GetInt("general.file_type"), GgufFileTypeOf(type));
    EXPECT_EQ(*(*out)->GetString("general.name"), "tiny-llama");
    EXPECT_EQ((**(*out)->GetStringArray("tokenizer.ggml.tokens")).size(), 64u);
    EXPECT_EQ((*out)->tensors().size(), (*in)->tensors().size());
    for (const GgufTensorInfo& t : (*in)->tensors()) {
      const GgufTensorInfo* o = *(*out)->GetTensor(t.name);
      EXPECT_EQ(o->dims, t.dims);
      if (t.dims.size() == 1) {
        EXPECT_EQ(o->type, DType::kF32) << t.name;
      } else if (t.name == "odd.weight") {
        EXPECT_EQ(o->type, quant ? DType::kF16 : type);
      } else {
        EXPECT_EQ(o->type, type) << t.name;
      }
      const std::vector<float> a = Dequantized(t), b = Dequantized(*o);
      double max_err = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        max_err = std::max(max_err, std::fabs(double{a[i]} - b[i]));
      }
      // Values are in [-1, 1]: Q4 steps are <= 2/15, Q8 <= 1/127.
      const double tol = type == DType::kQ4_0 || type == DType::kQ4_1 ? 0.15
                         : type == DType::kQ8_0                       ? 0.01
                         : type == DType::kBF16                       ? 0.004
                                                                      : 0.001;
      EXPECT_LE(max_err, tol) << t.name << " " << DTypeName(type);
    }
    auto model = LoadModel(out_path);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->layers[0].w_gate.type, type);
  }
}

TEST(RequantizeTest, SameTypeCopiesBytes) {
  TempDir dir("requant");
  const std::string in_path = dir.Path("q41.gguf");
  ASSERT_TRUE(testing_util::TinyGguf(TinySpec(), DType::kQ4_1, DType::kF32)
                  .WriteFile(in_path)
                  .ok());
  auto in = GgufFile::Open(in_path);
  ASSERT_TRUE(in.ok());
  auto stats = RequantizeGguf(**in, DType::kQ4_1, dir.Path("out.gguf"));
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->converted, 0);
  EXPECT_GT(stats->copied, 0);
  auto out = GgufFile::Open(dir.Path("out.gguf"));
  ASSERT_TRUE(out.ok());
  const GgufTensorInfo* a = *(*in)->GetTensor("blk.1.ffn_down.weight");
  const GgufTensorInfo* b = *(*out)->GetTensor("blk.1.ffn_down.weight");
  ASSERT_EQ(a->num_bytes, b->num_bytes);
  EXPECT_EQ(std::memcmp(a->data, b->data, a->num_bytes), 0);
}

}  // namespace
}  // namespace pdserve
