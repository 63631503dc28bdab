// Internal helpers shared by the kernel files (not part of the public API).
#ifndef PDSERVE_KERNELS_CUDA_SRC_COMMON_CUH_
#define PDSERVE_KERNELS_CUDA_SRC_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"

namespace pdserve {
namespace cuda {
namespace internal {

// Records a printf-style detail for LastErrorDetail() and returns
// cudaErrorInvalidValue.
cudaError_t Fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Checks the launch that was just enqueued; records `what` on failure.
cudaError_t CheckLaunch(const char* what);
// Records a detail for an error code that is not InvalidValue.
cudaError_t FailWith(cudaError_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

// Raises `func`'s dynamic shared memory limit to `bytes` once per device
// (`done` holds one bit per device id < 64; retried after a failure).
cudaError_t EnsureSharedMemory(const void* func, int bytes,
                               std::atomic<uint64_t>* done, const char* what);

// Per-file parts of PrepareKernels().
cudaError_t PreparePrefill();
cudaError_t PrepareSampling();
cudaError_t PrepareDecode();
cudaError_t PrepareFlash();

inline bool Aligned(const void* p, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Bytes per 32-value block (quantized) or per value (dense); 0 if unknown.
inline int64_t TypeUnitBytes(WType t) {
  switch (t) {
    case WType::kF32:
      return 4;
    case WType::kF16:
      return 2;
    case WType::kBF16:
      return 2;
    case WType::kQ8_0:
      return 34;
    case WType::kQ4_0:
      return 18;
    case WType::kQ4_1:
      return 20;
  }
  return 0;
}
inline bool IsQuantized(WType t) {
  return t == WType::kQ8_0 || t == WType::kQ4_0 || t == WType::kQ4_1;
}
const char* TypeName(WType t);

// Host-side validation of a DeviceMatrix: known type, positive shape, cols a
// multiple of 32 for quantized types, row_bytes >= the row's data and
// aligned to the type's natural alignment. `what` names the caller.
cudaError_t CheckMatrix(const DeviceMatrix& w, const char* what);

__device__ __forceinline__ float F16Bits(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ float BF16Bits(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}
__device__ __forceinline__ uint16_t LoadU16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}

// Value c of a row of type t (row points at the row's first byte; 2-byte
// aligned for all but f32, which is 4-byte aligned).
__device__ __forceinline__ float LoadElement(WType t, const uint8_t* row,
                                             int64_t c) {
  switch (t) {
    case WType::kF32:
      return reinterpret_cast<const float*>(row)[c];
    case WType::kF16:
      return F16Bits(reinterpret_cast<const uint16_t*>(row)[c]);
    case WType::kBF16:
      return BF16Bits(reinterpret_cast<const uint16_t*>(row)[c]);
    case WType::kQ8_0: {
      const uint8_t* b = row + (c >> 5) * 34;
      const int j = static_cast<int>(c & 31);
      return F16Bits(LoadU16(b)) *
             static_cast<float>(static_cast<int8_t>(b[2 + j]));
    }
    case WType::kQ4_0: {
      const uint8_t* b = row + (c >> 5) * 18;
      const int j = static_cast<int>(c & 31);
      const uint8_t q = b[2 + (j & 15)];
      const int nib = j < 16 ? (q & 15) : (q >> 4);
      return F16Bits(LoadU16(b)) * static_cast<float>(nib - 8);
    }
    case WType::kQ4_1: {
      const uint8_t* b = row + (c >> 5) * 20;
      const int j = static_cast<int>(c & 31);
      const uint8_t q = b[4 + (j & 15)];
      const int nib = j < 16 ? (q & 15) : (q >> 4);
      return F16Bits(LoadU16(b)) * static_cast<float>(nib) +
             F16Bits(LoadU16(b + 2));
    }
  }
  return 0.0f;
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  }
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
// gets the result. `scratch` holds 32 floats; contains a __syncthreads at
// entry so it can be called repeatedly.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}

}  // namespace internal
}  // namespace cuda
}  // namespace pdserve

#endif  // PDSERVE_KERNELS_CUDA_SRC_COMMON_CUH_
