// MatMul over weights packed at load (PackWeights) for every SIMD level that
// packs: against the reference, bitwise batch invariance, the same results
// through MatMulGrouped, and the packing entry points' contracts.
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/matmul.h"
#include "kernels/matmul_grouped.h"
#include "kernels/matmul_internal.h"
#include "tests/kernels/matmul_test_util.h"

namespace pdserve {
namespace {

using kernels_internal::IsaKernels;
using kernels_internal::MatMulGroupedWith;
using kernels_internal::MatMulWith;
using kernels_internal::PackedWeightBytesWith;
using kernels_internal::SupportedKernels;
using test::CheckAgainstReference;
using test::kAllTypes;
using test::MakeActivations;
using test::MakeWeights;
using test::PackedView;
using test::TestWeights;

// The levels that pack at least one type (AVX2 and AVX-512 on x86-64
// machines), plus, for AVX-512, its other BF16 variant where this CPU can run
// it (the widened one always; the bf16 dot with AVX512-BF16).
std::vector<const IsaKernels*> PackingKernels() {
  std::vector<const IsaKernels*> out;
  for (const IsaKernels* k : SupportedKernels()) {
    if (k->packed == nullptr) continue;
    out.push_back(k);
#if defined(__x86_64__)
    if (k == &kernels_internal::Avx512Kernels()) {
      const bool dot = k->packed->bf16_activations;
      if (!dot && !kernels_internal::CpuHasAvx512Bf16()) continue;
      static IsaKernels other;
      other = *k;
      other.name = dot ? "avx512 (bf16 widened)" : "avx512 (bf16 dot)";
      other.packed = &kernels_internal::Avx512PackedKernels(!dot);
      out.push_back(&other);
    }
#endif
  }
  return out;
}

TEST(MatMulPackedTest, PacksEveryTypeButF32) {
  if (PackingKernels().empty()) GTEST_SKIP() << "no packing level here";
  for (const IsaKernels* k : PackingKernels()) {
    for (DType type : kAllTypes) {
      const TestWeights w = MakeWeights(type, 13, 64, 1);
      const int64_t bytes = PackedWeightBytesWith(*k, w.view);
      if (type == DType::kF32) {
        EXPECT_EQ(bytes, 0) << k->name;
        continue;
      }
      // Whole row groups (the last padded), each a multiple of 64 bytes.
      EXPECT_GE(bytes, 13 * w.view.row_bytes) << k->name << " " << DTypeName(type);
      EXPECT_EQ(bytes % 64, 0) << k->name << " " << DTypeName(type);
      std::vector<uint8_t> buf;
      const WeightView p = PackedView(*k, w, buf);
      EXPECT_EQ(p.pack_format, k->packed->format);
      EXPECT_NE(p.packed, nullptr);
      EXPECT_EQ(p.data, w.view.data);  // the row-major original is kept
    }
  }
}

TEST(MatMulPackedTest, MatchesReferenceForEveryType) {
  if (PackingKernels().empty()) GTEST_SKIP() << "no packing level here";
  ThreadPool pool(2);
  for (const IsaKernels* k : PackingKernels()) {
    for (DType type : kAllTypes) {
      for (int64_t rows : {1, 7, 8, 9, 67}) {
        for (int64_t cols : {32, 96, 576}) {
          for (int64_t n_tokens : {1, 2, 3, 4, 5, 6, 7, 13}) {
            CheckAgainstReference(*k, type, rows, cols, n_tokens, pool,
                                  /*pack=*/true);
          }
        }
      }
      CheckAgainstReference(*k, type, 129, 4096, 3, pool, true);
      CheckAgainstReference(*k, type, 33, 1536, 67, pool, true);
      CheckAgainstReference(*k, type, 260, 576, 1, pool, true);
    }
  }
}

TEST(MatMulPackedTest, FloatTypesAcceptAnyColumnCount) {
  if (PackingKernels().empty()) GTEST_SKIP() << "no packing level here";
  ThreadPool pool(2);
  for (const IsaKernels* k : PackingKernels()) {
    for (DType type : {DType::kF16, DType::kBF16}) {
      for (int64_t cols : {1, 5, 15, 17, 31, 33, 63, 65, 100, 129, 4257}) {
        for (int64_t n_tokens : {1, 3, 4, 7, 25}) {
          CheckAgainstReference(*k, type, 9, cols, n_tokens, pool, true);
        }
      }
    }
  }
}

// Values past cols and the row padding must never leak in: NaN there would
// spread into every output of the row group.
TEST(MatMulPackedTest, BatchInvariantBitwiseAndIgnoresPastColumns) {
  if (PackingKernels().empty()) GTEST_SKIP() << "no packing level here";
  constexpr int64_t kRows = 75, kTokens = 67;
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (const IsaKernels* k : PackingKernels()) {
    for (DType type : kAllTypes) {
      // 4,257 columns: a prefill of more than one token tile cuts float
      // matrices into 2,048-column spans; the sums must not change.
      for (int64_t cols : {int64_t{352}, int64_t{131}, int64_t{4257}}) {
        if (kernels_internal::IsQuantized(type) && cols % 32 != 0) continue;
        SCOPED_TRACE(std::string(k->name) + " " + DTypeName(type) +
                     " cols=" + std::to_string(cols));
        const int64_t x_stride = cols + 1;
        std::vector<float> x = MakeActivations(kTokens, x_stride, 99);
        for (int64_t t = 0; t < kTokens; ++t)
          x[t * x_stride + cols] = std::nanf("");
        const TestWeights w = MakeWeights(type, kRows, cols, 5);
        std::vector<uint8_t> buf;
        const WeightView pw = PackedView(*k, w, buf);
        std::vector<float> full(kTokens * kRows);
        MatMulWith(*k, pw, x.data(), x_stride, kTokens, full.data(), kRows,
                   pool2);
        for (float v : full) ASSERT_FALSE(std::isnan(v));
        std::vector<float> part(kTokens * kRows);
        for (int64_t n : {1, 2, 3, 5, 8, 13, 31, 67}) {
          for (int64_t start : {int64_t{0}, int64_t{1}, kTokens - n}) {
            if (start + n > kTokens) continue;
            for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
              MatMulWith(*k, pw, &x[start * x_stride], x_stride, n,
                         part.data(), kRows, *pool);
              ASSERT_EQ(std::memcmp(part.data(), &full[start * kRows],
                                    n * kRows * sizeof(float)),
                        0)
                  << "n=" << n << " start=" << start
                  << " threads=" << pool->num_threads();
            }
          }
        }
      }
    }
  }
}

// Products of one input through packed weights (Q, K, V; gate, up) in one
// grouped call write bitwise what separate MatMuls write, packed or not
// mixed within the call.
TEST(MatMulPackedTest, GroupedMatchesSeparateProducts) {
  if (PackingKernels().empty()) GTEST_SKIP() << "no packing level here";
  constexpr int64_t kCols = 192;
  ThreadPool pool(2);
  for (const IsaKernels* k : PackingKernels()) {
    for (DType type : kAllTypes) {
      for (int64_t n_tokens : {1, 9}) {
        SCOPED_TRACE(std::string(k->name) + " " + DTypeName(type) +
                     " tokens=" + std::to_string(n_tokens));
        const std::vector<float> x = MakeActivations(n_tokens, kCols, 7);
        const TestWeights a = MakeWeights(type, 40, kCols, 1);
        const TestWeights b = MakeWeights(type, 19, kCols, 2);
        const TestWeights c = MakeWeights(type, 19, kCols, 3);
        std::vector<uint8_t> ba, bb;
        const WeightView pa = PackedView(*k, a, ba);
        const WeightView pb = PackedView(*k, b, bb);
        const WeightView* views[] = {&pa, &pb, &c.view};  // c not packed
        std::vector<MatMulGroup> groups;
        std::vector<std::vector<float>> grouped(3), separate(3);
        for (int i = 0; i < 3; ++i) {
          grouped[i].assign(n_tokens * views[i]->rows, -1.0f);
          separate[i].assign(n_tokens * views[i]->rows, -2.0f);
          groups.push_back(MatMulGroup{*views[i], x.data(), kCols, n_tokens,
                                       grouped[i].data(), views[i]->rows});
          MatMulWith(*k, *views[i], x.data(), kCols, n_tokens,
                     separate[i].data(), views[i]->rows, pool);
        }
        MatMulGroupedWith(*k, groups, pool);
        for (int i = 0; i < 3; ++i) EXPECT_EQ(grouped[i], separate[i]) << i;
      }
    }
  }
}

// Levels without packing (and views packed for another level) read the
// row-major data: the public entry points on any machine.
TEST(MatMulPackedTest, PublicPackingFollowsTheActiveLevel) {
  const TestWeights w = MakeWeights(DType::kQ4_0, 24, 128, 4);
  const int64_t bytes = PackedWeightBytes(w.view);
  std::vector<uint8_t> buf(bytes + 64);
  const auto addr = reinterpret_cast<uintptr_t>(buf.data());
  const WeightView p = PackWeights(w.view, buf.data() + (64 - addr % 64) % 64);
  EXPECT_EQ(p.packed != nullptr, bytes > 0);
  ThreadPool pool(2);
  const std::vector<float> x = MakeActivations(3, 128, 5);
  std::vector<float> y(3 * 24), want(3 * 24);
  MatMul(p, x.data(), 128, 3, y.data(), 24, pool);
  MatMulWith(kernels_internal::ActiveKernels(), p, x.data(), 128, 3,
             want.data(), 24, pool);
  EXPECT_EQ(y, want);
  // A packed view run with the scalar kernels uses the row-major data.
  MatMulWith(kernels_internal::ScalarKernels(), p, x.data(), 128, 3, y.data(),
             24, pool);
  MatMulWith(kernels_internal::ScalarKernels(), w.view, x.data(), 128, 3,
             want.data(), 24, pool);
  EXPECT_EQ(y, want);
}

}  // namespace
}  // namespace pdserve
