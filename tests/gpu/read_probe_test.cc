// The device read-bandwidth probe (kernels/cuda/plugin/read_probe.h, the
// kernel cuda::ReadSweep): the sweep sums every word of its buffer exactly
// once (any size, tails included) and refuses bad sizes; the probe reports
// bytes / fastest sweep and checks its own sums; the default sweep is larger
// than L2; and a CUDA engine's bandwidth utilisation ratio is computed
// against the runner's probe, not the host's. Label gpu (skips without a
// device); emu_read_probe_test runs it on the CPU emulator.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "common/metrics/process_metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/plugin/cuda_runner.h"
#include "kernels/cuda/plugin/read_probe.h"
#include "tests/engine/model_test_util.h"
#include "tests/gpu/kernels_test_util.h"
#include "tests/gpu/model_gpu_test_util.h"

namespace pdserve::gpu_test {
namespace {

using cuda_runner::MeasureDeviceReadBandwidth;
using cuda_runner::ReadProbeOptions;
using ::testing::HasSubstr;

// Sum of words [0, n) of `words` after one ReadSweep over them.
unsigned long long SweepSum(const std::vector<uint32_t>& words) {
  void* buf = nullptr;
  unsigned long long* sum = nullptr;
  const size_t bytes = words.size() * 4;
  EXPECT_EQ(cudaMalloc(&buf, bytes), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&sum), sizeof(*sum)),
            cudaSuccess);
  EXPECT_EQ(cudaMemcpy(buf, words.data(), bytes, cudaMemcpyHostToDevice),
            cudaSuccess);
  EXPECT_EQ(cudaMemset(sum, 0, sizeof(*sum)), cudaSuccess);
  const cudaError_t e =
      cuda::ReadSweep(buf, static_cast<int64_t>(bytes), sum, nullptr);
  EXPECT_EQ(e, cudaSuccess) << cuda::LastErrorDetail();
  unsigned long long got = 0;
  EXPECT_EQ(cudaMemcpy(&got, sum, sizeof(got), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(sum);
  cudaFree(buf);
  return got;
}

TEST(ReadProbeTest, SweepSumsEveryWordOnce) {
  PDSERVE_REQUIRE_GPU();
  // 16 bytes (one vector), a size that is not a multiple of a block's
  // unrolled step, and one past several steps.
  for (size_t words : {size_t{4}, size_t{4 * 1000 + 4}, size_t{4 * 70001}}) {
    std::vector<uint32_t> data(words);
    std::iota(data.begin(), data.end(), 0xfffff000u);  // wraps past 2^32
    unsigned long long want = 0;
    for (uint32_t w : data) want += w;
    EXPECT_EQ(SweepSum(data), want) << words << " words";
  }
}

TEST(ReadProbeTest, SweepRefusesBadSizes) {
  PDSERVE_REQUIRE_GPU();
  void* buf = nullptr;
  unsigned long long* sum = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 64), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&sum), sizeof(*sum)),
            cudaSuccess);
  EXPECT_EQ(cuda::ReadSweep(buf, 40, sum, nullptr), cudaErrorInvalidValue);
  EXPECT_THAT(cuda::LastErrorDetail(), HasSubstr("40 bytes"));
  EXPECT_EQ(cuda::ReadSweep(buf, 0, sum, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::ReadSweep(static_cast<char*>(buf) + 4, 16, sum, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::ReadSweep(buf, 16, nullptr, nullptr), cudaErrorInvalidValue);
  cudaFree(sum);
  cudaFree(buf);
}

TEST(ReadProbeTest, ProbeReportsBytesOverTheFastestSweep) {
  PDSERVE_REQUIRE_GPU();
  ReadProbeOptions options;
  options.buffer_bytes = (int64_t{1} << 20) + 1000;  // rounded down to 16s
  options.timed_sweeps = 2;
  auto r = MeasureDeviceReadBandwidth(options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->buffer_bytes, (int64_t{1} << 20) + 992);
  EXPECT_EQ(r->sweeps, 3);
  ASSERT_GT(r->best_ms, 0.0);
  EXPECT_TRUE(std::isfinite(r->bytes_per_second));
  EXPECT_DOUBLE_EQ(r->bytes_per_second,
                   static_cast<double>(r->buffer_bytes) / (r->best_ms * 1e-3));

  options.timed_sweeps = 0;
  auto bad = MeasureDeviceReadBandwidth(options);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("timed_sweeps is 0"));
}

TEST(ReadProbeTest, DefaultSweepIsLargerThanL2) {
  PDSERVE_REQUIRE_GPU();
  int l2 = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0),
            cudaSuccess);
  ASSERT_GT(l2, 0);
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  const int64_t bytes = cuda_runner::DefaultReadProbeBytes();
  EXPECT_EQ(bytes % 16, 0);
  if (static_cast<int64_t>(free_bytes / 4) >= int64_t{8} * l2) {
    EXPECT_GE(bytes, int64_t{8} * l2);
    EXPECT_GE(bytes, int64_t{256} << 20);
  }
  EXPECT_LE(bytes, static_cast<int64_t>(free_bytes / 4));
}

// The engine's metrics on a CUDA runner: the peak is the runner's own probe
// (source "device_probe") and the ratio is bandwidth / that peak.
TEST(ReadProbeTest, UtilisationRatioIsAgainstTheRunnersProbe) {
  PDSERVE_REQUIRE_GPU();
  testing_model::TinyShape shape;
  auto m = testing_model::MakeTinyModel(shape);
  auto runner = cuda_runner::CreateCudaRunner(
      m->weights, cuda_runner::MakeGeometry(m->weights.config, kPageSize, 8, 4),
      32, cuda_runner::RunnerOptions{});
  ASSERT_TRUE(runner.ok()) << runner.status();
  metrics::ProcessMetricsFlags flags;
  double measured = 0.0;
  flags.device_probe = [&]() -> absl::StatusOr<double> {
    absl::StatusOr<double> bw = (*runner)->MeasureReadBandwidth(int64_t{1} << 20);
    if (bw.ok()) measured = *bw;
    return bw;
  };
  auto handle = metrics::StartEngineMetrics(flags);
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_GT(measured, 0.0);
  EXPECT_EQ(handle->metrics->peak_bandwidth_bytes_per_second(), measured);
  // A decode step that moved half the probed rate.
  metrics::StepStats step;
  step.kind = metrics::StepKind::kDecode;
  step.duration_seconds = 0.01;
  step.decode_tokens = 1;
  step.batch_size = 1;
  step.weight_bytes_read = static_cast<int64_t>(measured * 0.01 * 0.5);
  ASSERT_TRUE(handle->metrics->RecordStep(step).ok());
  EXPECT_NEAR(handle->metrics->bandwidth_utilization_ratio(), 0.5, 1e-6);
}

}  // namespace
}  // namespace pdserve::gpu_test
