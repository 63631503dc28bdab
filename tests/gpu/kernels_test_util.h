// Shared helpers of the CUDA kernel tests (tests/gpu/kernels_*_test.cc):
// device detection (tests skip without a GPU), an owning device buffer and
// assertion macros that print LastErrorDetail().
#ifndef PDSERVE_TESTS_GPU_KERNELS_TEST_UTIL_H_
#define PDSERVE_TESTS_GPU_KERNELS_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_kernels.h"

namespace pdserve::cuda::testing {

// True when a CUDA device is usable (cudaGetDeviceCount succeeds, >= 1).
inline bool HasDevice() {
  static const bool has = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  }();
  return has;
}

#define PDSERVE_REQUIRE_GPU()                                \
  do {                                                       \
    if (!::pdserve::cuda::testing::HasDevice()) {            \
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount)"; \
    }                                                        \
  } while (0)

#define CUDA_ASSERT_OK(expr)                                                   \
  do {                                                                         \
    const cudaError_t _e = (expr);                                             \
    ASSERT_EQ(_e, cudaSuccess) << #expr << ": " << cudaGetErrorString(_e)      \
                               << " / " << ::pdserve::cuda::LastErrorDetail(); \
  } while (0)

// Owning device allocation of n elements of T (zero-filled).
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { Resize(n); }
  explicit DeviceBuffer(const std::vector<T>& host) {
    Resize(host.size());
    Upload(host);
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void Resize(size_t n) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    n_ = n;
    if (n == 0) return;
    if (cudaMalloc(&ptr_, n * sizeof(T)) != cudaSuccess ||
        cudaMemset(ptr_, 0, n * sizeof(T)) != cudaSuccess) {
      ADD_FAILURE() << "cudaMalloc/cudaMemset of " << n * sizeof(T)
                    << " bytes failed";
      ptr_ = nullptr;
    }
  }
  void Upload(const std::vector<T>& host) {
    ASSERT_LE(host.size(), n_);
    ASSERT_EQ(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess)
        << cudaGetErrorString(cudaGetLastError());
    EXPECT_EQ(
        cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost),
        cudaSuccess);
    return host;
  }
  T* get() const { return static_cast<T*>(ptr_); }
  size_t size() const { return n_; }

 private:
  void* ptr_ = nullptr;
  size_t n_ = 0;
};

inline std::vector<float> RandomFloats(size_t n, std::mt19937& rng,
                                       float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace pdserve::cuda::testing

#endif  // PDSERVE_TESTS_GPU_KERNELS_TEST_UTIL_H_
