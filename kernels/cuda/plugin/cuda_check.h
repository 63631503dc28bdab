// Status helpers for CUDA runtime calls in the runner (host code).
#ifndef PDSERVE_KERNELS_CUDA_PLUGIN_CUDA_CHECK_H_
#define PDSERVE_KERNELS_CUDA_PLUGIN_CUDA_CHECK_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_kernels.h"

namespace pdserve::cuda_runner {

// OK for cudaSuccess; otherwise INTERNAL (RESOURCE_EXHAUSTED for
// cudaErrorMemoryAllocation) naming `what`, the CUDA error and the kernel
// library's LastErrorDetail() when it has one.
inline absl::Status CudaStatus(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return absl::OkStatus();
  const char *detail = cuda::LastErrorDetail();
  std::string msg = absl::StrCat(what, ": ", cudaGetErrorString(e), " (",
                                 cudaGetErrorName(e), ")");
  if (detail != nullptr && detail[0] != '\0') {
    absl::StrAppend(&msg, "; ", detail);
  }
  if (e == cudaErrorMemoryAllocation) {
    return absl::ResourceExhaustedError(msg);
  }
  return absl::InternalError(msg);
}

}  // namespace pdserve::cuda_runner

#define PDSERVE_CUDA_RETURN_IF_ERROR(expr)                                 \
  do {                                                                     \
    const cudaError_t pdserve_cuda_err_ = (expr);                          \
    if (pdserve_cuda_err_ != cudaSuccess) {                                \
      return ::pdserve::cuda_runner::CudaStatus(pdserve_cuda_err_, #expr); \
    }                                                                      \
  } while (0)

#endif  // PDSERVE_KERNELS_CUDA_PLUGIN_CUDA_CHECK_H_
