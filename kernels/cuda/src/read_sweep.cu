// ReadSweep: the device read-bandwidth probe's kernel (cuda_kernels.h).
#include "kernels/cuda/src/common.cuh"

namespace pdserve {
namespace cuda {
namespace {

constexpr int kSweepThreads = 256;
constexpr int kSweepUnroll = 4;  // independent 16-byte loads in flight
constexpr int kSweepBlocksPerSm = 8;

__device__ __forceinline__ unsigned long long WordSum(uint4 v) {
  return static_cast<unsigned long long>(v.x) + v.y + v.z + v.w;
}

// Grid-stride over n 16-byte vectors, kSweepUnroll of them per step; each
// warp adds its partial sum to *sum once.
__global__ void __launch_bounds__(kSweepThreads)
    ReadSweepKernel(const uint4* __restrict__ p, int64_t n,
                    unsigned long long* sum) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned long long acc = 0;
  for (; i + (kSweepUnroll - 1) * stride < n; i += kSweepUnroll * stride) {
    uint4 v[kSweepUnroll];
#pragma unroll
    for (int u = 0; u < kSweepUnroll; ++u) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < kSweepUnroll; ++u) acc += WordSum(v[u]);
  }
  for (; i < n; i += stride) acc += WordSum(__ldcs(p + i));
  for (int offset = 16; offset > 0; offset >>= 1) {
    acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  }
  if ((threadIdx.x & 31) == 0) atomicAdd(sum, acc);
}

}  // namespace

cudaError_t ReadSweep(const void* buf, int64_t bytes, unsigned long long* sum,
                      cudaStream_t stream) {
  if (buf == nullptr || sum == nullptr) {
    return internal::Fail("ReadSweep: null buffer or sum");
  }
  if (bytes <= 0 || bytes % 16 != 0 || !internal::Aligned(buf, 16)) {
    return internal::Fail(
        "ReadSweep: %lld bytes at %p: need a positive multiple of 16, "
        "16-byte aligned",
        static_cast<long long>(bytes), buf);
  }
  int device = 0;
  int sms = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(
          &sms, cudaDevAttrMultiProcessorCount, device);
      e != cudaSuccess) {
    return e;
  }
  const int64_t n = bytes / 16;
  const int64_t wanted = internal::CeilDiv(n, kSweepThreads * kSweepUnroll);
  const int64_t most = static_cast<int64_t>(sms > 0 ? sms : 1) *
                       kSweepBlocksPerSm;
  const int blocks = static_cast<int>(wanted < most ? wanted : most);
  ReadSweepKernel<<<blocks, kSweepThreads, 0, stream>>>(
      static_cast<const uint4*>(buf), n, sum);
  return internal::CheckLaunch("ReadSweep");
}

}  // namespace cuda
}  // namespace pdserve
