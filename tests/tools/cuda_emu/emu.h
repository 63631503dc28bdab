// CPU emulation shim for pdserve's CUDA kernels (verification only).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __forceinline__
#define __forceinline__ inline
#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)

inline uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

namespace emu {
extern unsigned char dyn_smem[];
void SyncThreads();
uint64_t WarpExchange(uint64_t bits, int src_lane);
void Run(dim3 grid, dim3 block, std::function<void()> body,
         size_t smem = 256 * 1024);
// Runtime side (runtime.cc): a launch is checked (configuration, dynamic
// shared memory vs cudaFuncSetAttribute, pointer arguments), then run now or,
// when `stream` is capturing, recorded as a graph node and run at replay.
bool CheckLaunchConfig(const void* kernel, dim3 grid, dim3 block, size_t smem);
void CheckKernelPointer(const void* kernel, int index, const void* p);
cudaError_t Enqueue(cudaStream_t stream, std::function<void()> work,
                    const char* what);
void WarpSync();
template <class K, class... A>
void Launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, K kernel,
            A... args) {
  const void* k = reinterpret_cast<const void*>(kernel);
  if (!CheckLaunchConfig(k, grid, block, smem)) return;
  int i = 0;
  auto check = [&](auto a) {
    if constexpr (std::is_pointer_v<decltype(a)>) {
      CheckKernelPointer(k, i, reinterpret_cast<const void*>(a));
    }
    ++i;
  };
  (check(args), ...);
  Enqueue(
      stream,
      [=]() {
        Run(
            grid, block, [=]() { kernel(args...); }, smem);
      },
      "kernel launch");
}
template <class T>
uint64_t Bits(T v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
T From(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}
}  // namespace emu

inline void __syncthreads() { emu::SyncThreads(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::WarpSync(); }
template <class T>
T __shfl_xor_sync(unsigned, T v, int o, int = 32) {
  const int lane = threadIdx.x & 31;
  return emu::From<T>(emu::WarpExchange(emu::Bits(v), lane ^ o));
}
template <class T>
T __shfl_sync(unsigned, T v, int src, int = 32) {
  return emu::From<T>(emu::WarpExchange(emu::Bits(v), src & 31));
}
template <class T>
T __shfl_up_sync(unsigned, T v, unsigned d, int = 32) {
  const int lane = threadIdx.x & 31;
  const int src = lane - static_cast<int>(d);
  const T got =
      emu::From<T>(emu::WarpExchange(emu::Bits(v), src < 0 ? lane : src));
  return src < 0 ? v : got;
}
template <class T>
T __ldg(const T* p) {
  return *p;
}
template <class T>
T __ldcs(const T* p) {
  return *p;
}
inline unsigned long long atomicAdd(unsigned long long* p,
                                    unsigned long long v) {
  const unsigned long long old = *p;
  *p = old + v;  // fibers: no preemption inside
  return old;
}
inline unsigned __float_as_uint(float f) {
  return emu::From<unsigned>(emu::Bits(f));
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned long long __float2ull_rd(float f) {
  return static_cast<unsigned long long>(std::floor(f));
}
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<uint64_t>(a) * b) >> 32);
}
inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
inline float __fadd_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
inline float __fdiv_rn(float a, float b) {
  volatile float r = a / b;
  return r;
}
template <class A, class B>
inline auto min(A a, B b) -> std::common_type_t<A, B> {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? a : b;
}
template <class A, class B>
inline auto max(A a, B b) -> std::common_type_t<A, B> {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) > static_cast<C>(b) ? a : b;
}
// cuda_runtime.h's C++ overloads are nvcc-only; the emulation needs them.
template <class T>
inline cudaError_t cudaFuncSetAttribute(T* f, cudaFuncAttribute a, int v) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(f), a, v);
}
