// Steady-state MatMul / ParallelFor calls must not touch the heap (the
// engine's decode loop counts allocations). Counts global operator new.
#include <atomic>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"
#include "kernels/ops.h"

namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
// GCC cannot see that the replaced operator new above is malloc-based.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

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
      const int64_t before = g_allocations.load();
      for (int64_t n : {1, 16, 3, 1, 8}) {
        kernels_internal::MatMulWith(*k, w, x.data(), kCols, n, y.data(), kRows,
                                     pool);
      }
      (void)Dot(x.data(), x.data() + kCols, kCols);
      ApplyRope(x.data(), 9, 64, 64, 5.0, 10000.0f, RopeStyle::kNeox);
      EXPECT_EQ(g_allocations.load() - before, 0)
          << k->name << " " << DTypeName(type);
    }
  }
}

}  // namespace
}  // namespace pdserve
