// MatMul against MatMulReference for every dtype and every SIMD level this CPU
// supports, plus bitwise batch invariance.
#include "kernels/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/matmul_internal.h"
#include "tests/common/counting_allocator.h"
#include "tests/kernels/matmul_test_util.h"

namespace pdserve {
namespace {

using kernels_internal::IsaKernels;
using kernels_internal::IsQuantized;
using kernels_internal::MatMulWith;
using kernels_internal::SupportedKernels;
using test::CheckAgainstReference;
using test::kAllTypes;
using test::MakeActivations;
using test::MakeWeights;
using test::TestWeights;

TEST(MatMulTest, MatchesReferenceForEveryTypeAndLevel) {
  ThreadPool pool(2);
  for (const IsaKernels* k : SupportedKernels()) {
    for (DType type : kAllTypes) {
      for (int64_t rows : {1, 3, 7, 67}) {
        for (int64_t cols : {32, 64, 96, 160, 576}) {
          for (int64_t n_tokens : {1, 2, 3, 4, 5, 7, 8, 9, 17}) {
            CheckAgainstReference(*k, type, rows, cols, n_tokens, pool);
          }
        }
      }
      CheckAgainstReference(*k, type, 129, 4096, 3, pool);
      CheckAgainstReference(*k, type, 33, 1536, 67, pool);
      CheckAgainstReference(*k, type, 260, 576, 1, pool);
    }
  }
}

TEST(MatMulTest, FloatTypesAcceptAnyColumnCount) {
  ThreadPool pool(2);
  for (const IsaKernels* k : SupportedKernels()) {
    for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int64_t cols : {1, 5, 15, 17, 31, 33, 100}) {
        for (int64_t n_tokens : {1, 3, 6}) {
          CheckAgainstReference(*k, type, 9, cols, n_tokens, pool);
        }
      }
    }
  }
}

// The result for a token must not depend on the batch around it, on the row
// split between threads, or on the number of threads.
TEST(MatMulTest, BatchInvariantBitwise) {
  constexpr int64_t kRows = 75, kCols = 352, kTokens = 67;
  const int64_t x_stride = kCols;
  const std::vector<float> x = MakeActivations(kTokens, x_stride, 99);
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (const IsaKernels* k : SupportedKernels()) {
    for (DType type : kAllTypes) {
      SCOPED_TRACE(std::string(k->name) + " " + DTypeName(type));
      const TestWeights w = MakeWeights(type, kRows, kCols, 5);
      std::vector<float> full(kTokens * kRows);
      MatMulWith(*k, w.view, x.data(), x_stride, kTokens, full.data(), kRows,
                 pool2);
      std::vector<float> part(kTokens * kRows);
      for (int64_t n : {1, 2, 3, 5, 8, 13, 31, 67}) {
        for (int64_t start : {int64_t{0}, int64_t{1}, kTokens - n}) {
          if (start + n > kTokens) continue;
          for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
            MatMulWith(*k, w.view, &x[start * x_stride], x_stride, n,
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

// Float weights with many tokens take the AVX-512 GEMM kernel (tiles of 12
// tokens, the last one partial), one token the mat-vec tiles: for any column
// count (tails of the 16-lane classes), row count (partial 32-row panels) and
// thread count, every token's result is bitwise the one-token result and
// close to the reference.
TEST(MatMulTest, FloatGemmMatchesMatVecBitwise) {
  ThreadPool pool1(1), pool2(2);
  for (const IsaKernels* k : SupportedKernels()) {
    for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (const auto& [rows, cols] :
           std::vector<std::pair<int64_t, int64_t>>{{5, 0},
                                                    {1, 1},
                                                    {33, 7},
                                                    {45, 17},
                                                    {64, 100},
                                                    {97, 576},
                                                    {40, 1551}}) {
        constexpr int64_t kTokens = 53;
        SCOPED_TRACE(std::string(k->name) + " " + DTypeName(type) + " rows=" +
                     std::to_string(rows) + " cols=" + std::to_string(cols));
        const TestWeights w = MakeWeights(type, rows, cols, rows + 3 * cols);
        const int64_t x_stride = cols + 1;
        std::vector<float> x = MakeActivations(kTokens, x_stride, cols);
        // Values past cols must not leak in (NaN would spread).
        for (int64_t t = 0; t < kTokens; ++t)
          x[t * x_stride + cols] = std::nanf("");
        std::vector<float> one(kTokens * rows), all(kTokens * rows);
        for (int64_t t = 0; t < kTokens; ++t) {
          MatMulWith(*k, w.view, &x[t * x_stride], x_stride, 1, &one[t * rows],
                     rows, pool1);
        }
        for (ThreadPool* pool : {&pool1, &pool2}) {
          std::fill(all.begin(), all.end(), -1.0f);
          MatMulWith(*k, w.view, x.data(), x_stride, kTokens, all.data(), rows,
                     *pool);
          ASSERT_EQ(
              std::memcmp(one.data(), all.data(), all.size() * sizeof(float)),
              0)
              << "threads=" << pool->num_threads();
        }
        std::vector<float> ref(kTokens * rows);
        MatMulReference(w.view, x.data(), x_stride, kTokens, ref.data(), rows);
        for (int64_t i = 0; i < kTokens * rows; ++i) {
          const int64_t t = i / rows, r = i % rows;
          double abs_dot = 0.0;
          for (int64_t c = 0; c < cols; ++c) {
            abs_dot += std::fabs(w.deq[r * cols + c] *
                                 static_cast<double>(x[t * x_stride + c]));
          }
          ASSERT_LE(std::fabs(static_cast<double>(all[i]) - ref[i]),
                    2e-6 * abs_dot + 1e-6)
              << "t=" << t << " r=" << r;
        }
      }
    }
  }
}

// The GEMM's packing buffers depend only on the column count: once a shape
// has run on a thread, calls of any length or row range do not allocate (one
// thread, so that the warm-up surely ran on the thread that is measured).
TEST(MatMulTest, FloatGemmSteadyStateDoesNotAllocate) {
  constexpr int64_t kRows = 200, kCols = 576, kTokens = 70;
  ThreadPool pool(1);
  const std::vector<float> x = MakeActivations(kTokens, kCols, 3);
  std::vector<float> y(kTokens * kRows);
  for (const IsaKernels* k : SupportedKernels()) {
    for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
      const TestWeights w = MakeWeights(type, kRows, kCols, 11);
      // Warm up on a view of the first 40 rows (smaller row ranges).
      WeightView part = w.view;
      part.rows = 40;
      MatMulWith(*k, part, x.data(), kCols, kTokens, y.data(), kRows, pool);
      const int64_t before = test::AllocationCount();
      for (int64_t n : {int64_t{24}, int64_t{37}, kTokens, int64_t{1}}) {
        MatMulWith(*k, w.view, x.data(), kCols, n, y.data(), kRows, pool);
      }
      EXPECT_EQ(test::AllocationCount() - before, 0)
          << k->name << " " << DTypeName(type);
    }
  }
}

// Long rows (more blocks than one unpacked segment of the token-lane kernel)
// and batches of more than 256 tokens (several chunks of token groups) still
// match the reference and the one-token results bitwise.
TEST(MatMulTest, LongRowsAndLargeBatches) {
  constexpr int64_t kRows = 6, kCols = 32 * 261, kTokens = 290;
  const std::vector<float> x = MakeActivations(kTokens, kCols, 17);
  ThreadPool pool(2);
  for (const IsaKernels* k : SupportedKernels()) {
    for (DType type : {DType::kQ4_1, DType::kQ4_0, DType::kQ8_0}) {
      SCOPED_TRACE(std::string(k->name) + " " + DTypeName(type));
      CheckAgainstReference(*k, type, kRows, kCols, kTokens, pool);
      const TestWeights w = MakeWeights(type, kRows, kCols, 8);
      std::vector<float> full(kTokens * kRows), one(kRows);
      MatMulWith(*k, w.view, x.data(), kCols, kTokens, full.data(), kRows,
                 pool);
      for (int64_t t : {0, 15, 16, 255, 256, 289}) {
        MatMulWith(*k, w.view, &x[t * kCols], kCols, 1, one.data(), kRows,
                   pool);
        ASSERT_EQ(
            std::memcmp(one.data(), &full[t * kRows], kRows * sizeof(float)), 0)
            << "t=" << t;
      }
    }
  }
}

// GGML's quantizer never writes -128 into Q8_0, but a file may hold it; the
// sign tricks of the SIMD paths must still get it right.
TEST(MatMulTest, Q8_0ExtremeWeightsAndActivations) {
  // 5 blocks per row, 3 and 7 tokens: both quantized kernels, four-block
  // unpacking and its tail.
  constexpr int64_t kRows = 5, kCols = 160, kTokens = 7;
  std::vector<BlockQ8_0> blocks(kRows * kCols / 32);
  std::mt19937 rng(4);
  for (size_t b = 0; b < blocks.size(); ++b) {
    blocks[b].d = F32ToF16(0.01f * (1 + b % 3));
    for (int j = 0; j < 32; ++j) {
      blocks[b].qs[j] = static_cast<int8_t>(
          b % 2 == 0 ? -128 : static_cast<int>(rng() % 256) - 128);
    }
  }
  const WeightView w{DType::kQ8_0, kRows, kCols, kCols / 32 * 34,
                     blocks.data()};
  // Activations of one magnitude quantize exactly to +-127.
  std::vector<float> x(kTokens * kCols);
  for (int64_t i = 0; i < kTokens * kCols; ++i)
    x[i] = (i * 7) % 3 == 0 ? -2.0f : 2.0f;
  std::vector<float> ref(kTokens * kRows), y(kTokens * kRows);
  MatMulReference(w, x.data(), kCols, kTokens, ref.data(), kRows);
  ThreadPool pool(2);
  for (const IsaKernels* k : SupportedKernels()) {
    for (int64_t n : {int64_t{3}, kTokens}) {
      MatMulWith(*k, w, x.data(), kCols, n, y.data(), kRows, pool);
      for (int64_t i = 0; i < n * kRows; ++i) {
        EXPECT_NEAR(y[i], ref[i], 1e-5 * std::fabs(ref[i]) + 1e-5)
            << k->name << " n=" << n << " i=" << i;
      }
    }
  }
}

TEST(MatMulTest, IsaNameIsOneOfTheLevels) {
  const std::string isa = MatMulIsa();
  EXPECT_TRUE(isa == "scalar" || isa == "avx2" || isa == "avx512") << isa;
  // The active level is the highest supported unless PDSERVE_ISA lowers it
  // (ctest also runs this suite with PDSERVE_ISA=scalar and =avx2).
  const char* env = std::getenv("PDSERVE_ISA");
  const std::vector<const IsaKernels*> levels = SupportedKernels();
  std::string want = levels.back()->name;
  if (env != nullptr) {
    for (const IsaKernels* k : levels) {
      if (std::string(k->name) == env) want = env;
    }
  }
  EXPECT_EQ(isa, want) << "PDSERVE_ISA=" << (env ? env : "(unset)");
}

TEST(MatMulTest, PublicMatMulUsesActiveLevel) {
  ThreadPool pool(2);
  const TestWeights w = MakeWeights(DType::kQ4_1, 40, 128, 3);
  const std::vector<float> x = MakeActivations(5, 128, 4);
  std::vector<float> a(5 * 40), b(5 * 40);
  MatMul(w.view, x.data(), 128, 5, a.data(), 40, pool);
  MatMulWith(kernels_internal::ActiveKernels(), w.view, x.data(), 128, 5,
             b.data(), 40, pool);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace pdserve
