// MatMulGrouped against separate MatMul calls: bitwise equal for every dtype
// and SIMD level, on ragged groups (empty, one-token, token-lane sized,
// shared inputs, strided rows), whatever the pool size; no steady-state heap
// allocation.
#include "kernels/matmul_grouped.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/matmul_internal.h"
#include "tests/common/counting_allocator.h"

namespace pdserve {
namespace {

using kernels_internal::IsaKernels;
using kernels_internal::MatMulGroupedWith;
using kernels_internal::MatMulWith;
using kernels_internal::SupportedKernels;

constexpr DType kGroupedTestTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16,
                               DType::kQ8_0, DType::kQ4_0, DType::kQ4_1};

struct Matrix {
  std::vector<uint8_t> bytes;
  WeightView view;
};

Matrix RandomMatrix(DType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 0.5f);
  Matrix m;
  const int64_t row_bytes = RowBytes(type, cols).value();
  m.bytes.resize(row_bytes * rows);
  std::vector<float> src(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : src) v = dist(rng);
    QuantizeRow(type, src.data(), m.bytes.data() + r * row_bytes, cols);
  }
  m.view = WeightView{type, rows, cols, row_bytes, m.bytes.data()};
  return m;
}

// One test group: its weights, input (strided, possibly another group's) and
// output region.
struct Spec {
  DType type;
  int64_t rows, cols, n_tokens;
  int input;  // index of an earlier spec whose input to reuse, or -1
};

struct Case {
  std::vector<Matrix> weights;
  std::vector<std::vector<float>> inputs;  // per spec (empty when reused)
  std::vector<int64_t> x_stride, y_stride, y_offset;
  std::vector<MatMulGroup> groups;
  int64_t y_size = 0;
};

// Builds the groups of `specs`: x rows padded (stride cols + 32), outputs
// packed into one buffer with padding between rows (stride rows + 3).
Case MakeCase(const std::vector<Spec>& specs, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Case c;
  c.inputs.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const Spec& s = specs[i];
    c.weights.push_back(RandomMatrix(s.type, s.rows, s.cols, rng));
    const int src = s.input >= 0 ? s.input : static_cast<int>(i);
    c.x_stride.push_back(s.cols + 32);
    if (s.input < 0) {
      c.inputs[i].resize(std::max<int64_t>(1, s.n_tokens) * c.x_stride[i]);
      for (float& v : c.inputs[i]) v = dist(rng);
      // One outlier per token: activation quantization is visible.
      for (int64_t t = 0; t < s.n_tokens; ++t) {
        c.inputs[i][t * c.x_stride[i] + (t * 37) % s.cols] *= 6.0f;
      }
    }
    c.x_stride[i] = c.x_stride[src];
    c.y_stride.push_back(s.rows + 3);
    c.y_offset.push_back(c.y_size);
    c.y_size += s.n_tokens * c.y_stride[i] + 5;
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const int src = specs[i].input >= 0 ? specs[i].input : static_cast<int>(i);
    c.groups.push_back(MatMulGroup{c.weights[i].view, c.inputs[src].data(),
                                   c.x_stride[i], specs[i].n_tokens, nullptr,
                                   c.y_stride[i]});
  }
  return c;
}

// Points the groups' outputs into `y` (filled with a sentinel first).
void Bind(Case& c, std::vector<float>& y) {
  y.assign(c.y_size, -12345.0f);
  for (size_t i = 0; i < c.groups.size(); ++i) {
    c.groups[i].y = y.data() + c.y_offset[i];
  }
}

std::vector<float> Separate(const IsaKernels& k, Case& c, ThreadPool& pool) {
  std::vector<float> y;
  Bind(c, y);
  for (const MatMulGroup& g : c.groups) {
    MatMulWith(k, g.w, g.x, g.x_stride, g.n_tokens, g.y, g.y_stride, pool);
  }
  return y;
}

std::vector<float> Grouped(const IsaKernels& k, Case& c, ThreadPool& pool) {
  std::vector<float> y;
  Bind(c, y);
  MatMulGroupedWith(k, c.groups, pool);
  return y;
}

// Ragged MoE-like groups of one dtype: empty and one-token groups, an
// expert's gate and up sharing an input, row counts off the row tile, token
// counts around the token-lane threshold and over 16 (split prepare).
std::vector<Spec> RaggedSpecs(DType t) {
  return {
      {t, 64, 128, 1, -1},  {t, 64, 128, 1, 0},   // gate/up, one token
      {t, 64, 128, 0, -1},  {t, 64, 128, 0, 2},   // an unselected expert
      {t, 13, 96, 3, -1},   {t, 13, 96, 3, 4},    // rows not a tile multiple
      {t, 40, 128, 5, -1},  {t, 40, 128, 5, 6},   // token-lane threshold
      {t, 64, 128, 17, -1}, {t, 64, 128, 17, 8},  // two prepare units
      {t, 128, 64, 2, -1},                        // a down product
      {t, 7, 32, 40, -1},                         // many tokens, few rows
      {t, 1, 128, 1, -1},                         // a one-row gate
  };
}

void ExpectBitwiseEqual(const std::vector<float>& want,
                        const std::vector<float>& got,
                        const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(std::memcmp(&want[i], &got[i], sizeof(float)), 0)
        << what << " at " << i << ": " << want[i] << " vs " << got[i];
  }
}

TEST(MatMulGroupedTest, BitwiseEqualsSeparateMatMulsEveryDtypeAndIsa) {
  ThreadPool one(1), two(2), three(3);
  for (const IsaKernels* k : SupportedKernels()) {
    for (DType type : kGroupedTestTypes) {
      Case c = MakeCase(RaggedSpecs(type), 11);
      const std::vector<float> want = Separate(*k, c, one);
      // The products are real: every written value differs from the
      // sentinel, the padding keeps it.
      int64_t written = 0;
      for (float v : want) written += v != -12345.0f;
      int64_t expected_written = 0;
      for (const MatMulGroup& g : c.groups) {
        expected_written += g.n_tokens * g.w.rows;
      }
      EXPECT_EQ(written, expected_written) << k->name;
      for (ThreadPool* pool : {&one, &two, &three}) {
        const std::string what = std::string(k->name) + " " + DTypeName(type) +
                                 " threads " +
                                 std::to_string(pool->num_threads());
        ExpectBitwiseEqual(want, Grouped(*k, c, *pool), what);
      }
    }
  }
}

TEST(MatMulGroupedTest, MixedDtypesInOneCall) {
  // Every dtype in one call, the quantized ones sharing one input array (same
  // x but different type: each must prepare its own activations).
  std::vector<Spec> specs;
  for (DType t : kGroupedTestTypes)
    specs.push_back({t, 24, 64, 6, specs.empty() ? -1 : 0});
  specs.push_back({DType::kQ8_0, 33, 64, 1, -1});
  specs.push_back({DType::kQ4_1, 33, 64, 1, 6});
  ThreadPool one(1), two(2);
  for (const IsaKernels* k : SupportedKernels()) {
    Case c = MakeCase(specs, 5);
    const std::vector<float> want = Separate(*k, c, one);
    ExpectBitwiseEqual(want, Grouped(*k, c, two), k->name);
    ExpectBitwiseEqual(want, Grouped(*k, c, one), k->name);
  }
}

TEST(MatMulGroupedTest, ManyGroupsSpreadOverThreads) {
  // 48 small experts with ragged token counts (0..3): the work units of many
  // groups interleave across threads.
  std::vector<Spec> specs;
  for (int e = 0; e < 48; ++e) {
    const int64_t n = (e * 7) % 4;
    specs.push_back({DType::kQ8_0, 96, 256, n, -1});
    specs.push_back({DType::kQ8_0, 96, 256, n, 2 * e});
  }
  ThreadPool one(1), four(4);
  const IsaKernels& k = kernels_internal::ActiveKernels();
  Case c = MakeCase(specs, 3);
  const std::vector<float> want = Separate(k, c, one);
  for (int rep = 0; rep < 3; ++rep) {
    ExpectBitwiseEqual(want, Grouped(k, c, four), "rep " + std::to_string(rep));
  }
}

TEST(MatMulGroupedTest, LargeGroupsSplitIntoRowBlocks) {
  // Matrices of ~100-300 KiB: each is cut into many row blocks (the last one
  // short) that different threads compute.
  const std::vector<Spec> specs = {
      {DType::kQ8_0, 1000, 256, 1, -1},
      {DType::kQ8_0, 1000, 256, 1, 0},
      {DType::kQ4_1, 998, 256, 3, -1},
      {DType::kF16, 602, 128, 2, -1},
      {DType::kF32, 515, 64, 9, -1},
      {DType::kBF16, 301, 96, 0, -1},
      {DType::kQ4_0, 777, 64, 20, -1},
      // Float weights with many tokens (GEMM-style kernels), in blocks that
      // start off any panel boundary.
      {DType::kF32, 300, 64, 24, -1},
      {DType::kF16, 290, 128, 13, -1},
      {DType::kBF16, 200, 96, 30, -1},
  };
  ThreadPool one(1), two(2), three(3);
  for (const IsaKernels* k : SupportedKernels()) {
    Case c = MakeCase(specs, 9);
    const std::vector<float> want = Separate(*k, c, one);
    ExpectBitwiseEqual(want, Grouped(*k, c, two), k->name);
    ExpectBitwiseEqual(want, Grouped(*k, c, three), k->name);
  }
}

TEST(MatMulGroupedTest, EmptyCallsWriteNothing) {
  ThreadPool two(2);
  MatMulGrouped({}, two);
  Case c =
      MakeCase({{DType::kQ8_0, 8, 32, 0, -1}, {DType::kF32, 8, 32, 0, -1}}, 1);
  std::vector<float> y;
  Bind(c, y);
  MatMulGrouped(c.groups, two);
  for (float v : y) EXPECT_EQ(v, -12345.0f);
}

TEST(MatMulGroupedTest, SteadyStateDoesNotAllocate) {
  ThreadPool two(2);
  for (const IsaKernels* k : SupportedKernels()) {
    Case big = MakeCase(RaggedSpecs(DType::kQ4_1), 2);
    Case small = MakeCase(
        {{DType::kQ8_0, 64, 128, 1, -1}, {DType::kQ8_0, 64, 128, 1, 0}}, 4);
    std::vector<float> y_big, y_small;
    Bind(big, y_big);
    Bind(small, y_small);
    MatMulGroupedWith(*k, big.groups, two);  // grows the scratch
    const int64_t before = test::AllocationCount();
    MatMulGroupedWith(*k, small.groups, two);
    MatMulGroupedWith(*k, big.groups, two);
    MatMulGroupedWith(*k, small.groups, two);
    EXPECT_EQ(test::AllocationCount() - before, 0) << k->name;
  }
}

}  // namespace
}  // namespace pdserve
