// LastErrorDetail and the host-side validation helpers of common.cuh.
#include <cstdarg>
#include <cstdio>

#include "kernels/cuda/src/common.cuh"

namespace pdserve {
namespace cuda {
namespace {

thread_local char g_detail[512] = "";

void Record(const char* fmt, va_list args) {
  vsnprintf(g_detail, sizeof(g_detail), fmt, args);
}

}  // namespace

const char* LastErrorDetail() { return g_detail; }

cudaError_t PrepareKernels() {
  if (cudaError_t e = internal::PreparePrefill(); e != cudaSuccess) return e;
  if (cudaError_t e = internal::PrepareFlash(); e != cudaSuccess) return e;
  if (cudaError_t e = internal::PrepareSampling(); e != cudaSuccess) return e;
  return internal::PrepareDecode();
}

namespace internal {

cudaError_t Fail(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  Record(fmt, args);
  va_end(args);
  return cudaErrorInvalidValue;
}

cudaError_t FailWith(cudaError_t code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  Record(fmt, args);
  va_end(args);
  return code;
}

cudaError_t CheckLaunch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    snprintf(g_detail, sizeof(g_detail), "%s: launch failed: %s", what,
             cudaGetErrorString(e));
  }
  return e;
}

cudaError_t EnsureSharedMemory(const void* func, int bytes,
                               std::atomic<uint64_t>* done, const char* what) {
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) {
    return FailWith(e, "%s: cudaGetDevice: %s", what, cudaGetErrorString(e));
  }
  const uint64_t bit = dev < 64 ? uint64_t{1} << dev : 0;
  if (bit != 0 && (done->load(std::memory_order_acquire) & bit) != 0) {
    return cudaSuccess;
  }
  const cudaError_t e = cudaFuncSetAttribute(
      func, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) {
    return FailWith(e, "%s: %d bytes of shared memory on device %d: %s", what,
                    bytes, dev, cudaGetErrorString(e));
  }
  if (bit != 0) done->fetch_or(bit, std::memory_order_release);
  return cudaSuccess;
}

const char* TypeName(WType t) {
  switch (t) {
    case WType::kF32:
      return "F32";
    case WType::kF16:
      return "F16";
    case WType::kBF16:
      return "BF16";
    case WType::kQ8_0:
      return "Q8_0";
    case WType::kQ4_0:
      return "Q4_0";
    case WType::kQ4_1:
      return "Q4_1";
  }
  return "unknown";
}

cudaError_t CheckMatrix(const DeviceMatrix& w, const char* what) {
  const int64_t unit = TypeUnitBytes(w.type);
  if (unit == 0) {
    return Fail("%s: unsupported weight type id %d", what,
                static_cast<int>(w.type));
  }
  if (w.data == nullptr || w.rows <= 0 || w.cols <= 0) {
    return Fail("%s: empty matrix (data %p, %lld x %lld)", what, w.data,
                static_cast<long long>(w.rows), static_cast<long long>(w.cols));
  }
  const bool quant = IsQuantized(w.type);
  if (quant && w.cols % 32 != 0) {
    return Fail("%s: %s matrix has %lld columns, not a multiple of 32", what,
                TypeName(w.type), static_cast<long long>(w.cols));
  }
  const int64_t need = quant ? w.cols / 32 * unit : w.cols * unit;
  const int64_t align = w.type == WType::kF32 ? 4 : 2;
  if (w.row_bytes < need || w.row_bytes % align != 0 ||
      !Aligned(w.data, align)) {
    return Fail(
        "%s: %s matrix %lld x %lld: row_bytes %lld (need >= %lld, "
        "multiple of %lld) or data %p misaligned",
        what, TypeName(w.type), static_cast<long long>(w.rows),
        static_cast<long long>(w.cols), static_cast<long long>(w.row_bytes),
        static_cast<long long>(need), static_cast<long long>(align), w.data);
  }
  return cudaSuccess;
}

}  // namespace internal
}  // namespace cuda
}  // namespace pdserve
