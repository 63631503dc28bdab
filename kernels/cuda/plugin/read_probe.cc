#include "kernels/cuda/plugin/read_probe.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/plugin/cuda_check.h"
#include "kernels/cuda/plugin/runner_internal.h"

namespace pdserve::cuda_runner {
namespace {

constexpr unsigned char kFillByte = 0x01;
constexpr unsigned long long kFillWord = 0x01010101ull;

// Device buffer, sum word, stream and events, freed on every return path.
struct ProbeResources {
  void* buf = nullptr;
  unsigned long long* sum = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  ~ProbeResources() {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (sum != nullptr) cudaFree(sum);
    if (buf != nullptr) cudaFree(buf);
  }
};

absl::Status Prepare(ProbeResources& r, int64_t bytes) {
  if (cudaMalloc(&r.buf, static_cast<size_t>(bytes)) != cudaSuccess) {
    cudaGetLastError();
    r.buf = nullptr;
    return absl::ResourceExhaustedError(absl::StrCat(
        "device read probe: cannot allocate ", bytes,
        " bytes (set --peak-memory-bandwidth or --probe-buffer-bytes)"));
  }
  PDSERVE_CUDA_RETURN_IF_ERROR(
      cudaMalloc(reinterpret_cast<void**>(&r.sum), sizeof(*r.sum)));
  PDSERVE_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&r.start));
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&r.stop));
  PDSERVE_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(r.buf, kFillByte, static_cast<size_t>(bytes), r.stream));
  PDSERVE_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(r.sum, 0, sizeof(*r.sum), r.stream));
  return absl::OkStatus();
}

// One sweep between the two events; its duration in ms.
absl::StatusOr<float> TimedSweep(ProbeResources& r, int64_t bytes) {
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventRecord(r.start, r.stream));
  PDSERVE_CUDA_RETURN_IF_ERROR(cuda::ReadSweep(r.buf, bytes, r.sum, r.stream));
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventRecord(r.stop, r.stream));
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(r.stop));
  float ms = 0.0f;
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, r.start, r.stop));
  return ms;
}

}  // namespace

int64_t DefaultReadProbeBytes() {
  constexpr int64_t kFloor = int64_t{256} << 20;
  int device = 0;
  int l2 = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) !=
          cudaSuccess) {
    cudaGetLastError();
    l2 = 0;
  }
  int64_t bytes = std::max<int64_t>(kFloor, int64_t{8} * l2);
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess &&
      free_bytes > 0) {
    bytes = std::min<int64_t>(bytes, static_cast<int64_t>(free_bytes / 4));
  } else {
    cudaGetLastError();
  }
  return std::max<int64_t>(16, bytes / 16 * 16);
}

absl::StatusOr<ReadProbeResult> MeasureDeviceReadBandwidth(
    const ReadProbeOptions& options) {
  if (options.timed_sweeps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("device read probe: timed_sweeps is ",
                     options.timed_sweeps, ", must be >= 1"));
  }
  const int64_t bytes =
      options.buffer_bytes > 0 ? std::max<int64_t>(16, options.buffer_bytes / 16 * 16)
                               : DefaultReadProbeBytes();
  ProbeResources r;
  PDSERVE_RETURN_IF_ERROR(Prepare(r, bytes));
  ReadProbeResult result;
  result.buffer_bytes = bytes;
  float best = 0.0f;
  for (int i = 0; i <= options.timed_sweeps; ++i) {
    absl::StatusOr<float> ms = TimedSweep(r, bytes);
    if (!ms.ok()) return ms.status();
    if (i > 0 && (i == 1 || *ms < best)) best = *ms;  // sweep 0 warms up
  }
  result.sweeps = options.timed_sweeps + 1;
  unsigned long long sum = 0;
  PDSERVE_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(&sum, r.sum, sizeof(sum), cudaMemcpyDeviceToHost));
  const unsigned long long expected =
      static_cast<unsigned long long>(result.sweeps) *
      static_cast<unsigned long long>(bytes / 4) * kFillWord;
  if (sum != expected) {
    return absl::InternalError(absl::StrCat(
        "device read probe: ", result.sweeps, " sweeps of ", bytes,
        " bytes summed to ", sum, ", expected ", expected,
        " (the read kernel skipped or repeated data)"));
  }
  if (!(best > 0.0f)) {
    return absl::InternalError(absl::StrCat(
        "device read probe: the fastest sweep of ", bytes, " bytes took ",
        best, " ms (events did not time it)"));
  }
  result.best_ms = best;
  result.bytes_per_second = static_cast<double>(bytes) / (best * 1e-3);
  return result;
}

absl::StatusOr<double> CudaRunner::MeasureReadBandwidth(int64_t buffer_bytes) {
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device_index));
  ReadProbeOptions options;
  options.buffer_bytes = buffer_bytes;
  absl::StatusOr<ReadProbeResult> result = MeasureDeviceReadBandwidth(options);
  if (!result.ok()) return result.status();
  return result->bytes_per_second;
}

}  // namespace pdserve::cuda_runner
