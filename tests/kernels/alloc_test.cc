// Steady-state MatMul / ParallelFor calls must not touch the heap (the
// engine's decode loop counts allocations). Counts global operator new.
#include <atomic>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/common/counting_allocator.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"
#include "kernels/ops.h"


namespace pdserve {
namespace {

TEST(AllocationTest, SteadyStateMatMulDoesNotAllocate) {
  ThreadPool pool(2);
  constexpr int64_t kRows = 96, kCols = 576;
  std::vector<float> x(16 * kCols), y(16 * kRows), src(kCols);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (float& v : x) v = dist(rng);
  for (const auto* k : kernels_internal::SupportedKernels()) {
    for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                       DType::kQ4_0, DType::kQ4_1}) {
      const int64_t row_bytes = RowBytes(type, kCols).value();
      std::vector<uint8_t> bytes(row_bytes * kRows);
      for (int64_t r = 0; r < kRows; ++r) {
        for (float& v : src) v = dist(rng);
        QuantizeRow(type, src.data(), bytes.data() + r * row_bytes, kCols);
      }
      const WeightView w{type, kRows, kCols, row_bytes, bytes.data()};
      // Warm up with the largest batch so the scratch reaches its size.
      kernels_internal::MatMulWith(*k, w, x.data(), kCols, 16, y.data(), kRows,
                                   pool);
      const int64_t before = test::AllocationCount();
      for (int64_t n : {1, 16, 3, 1, 8}) {
        kernels_internal::MatMulWith(*k, w, x.data(), kCols, n, y.data(), kRows,
                                     pool);
      }
      (void)Dot(x.data(), x.data() + kCols, kCols);
      ApplyRope(x.data(), 9, 64, 64, 5.0, 10000.0f, RopeStyle::kNeox);
      EXPECT_EQ(test::AllocationCount() - before, 0)
          << k->name << " " << DTypeName(type);
    }
  }
}

}  // namespace
}  // namespace pdserve
