// cuBLAS GEMM wrapper (prefill / batched decode), activation conversion to
// f16/bf16 and weight dequantization to f16/bf16.
#include <cublas_v2.h>

#include "kernels/cuda/src/common.cuh"

namespace pdserve {
namespace cuda {
namespace {

using internal::CheckLaunch;
using internal::Fail;

__device__ __forceinline__ uint16_t ToHalfBits(float v, bool bf16) {
  return bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v))
              : __half_as_ushort(__float2half_rn(v));
}

// Groups of 4 values of a row per thread (one index division per group);
// 16-byte loads and 8-byte stores when `vec` (strides and pointers allow).
__global__ void ConvertKernel(const float* src, int64_t ss, int64_t rows,
                              int64_t cols, bool bf16, uint16_t* dst,
                              int64_t ds, bool vec) {
  const int64_t qpr = (cols + 3) / 4;
  const int64_t n = rows * qpr;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / qpr, c = (i - r * qpr) * 4;
    const float* sp = src + r * ss + c;
    uint16_t* dp = dst + r * ds + c;
    if (vec && c + 4 <= cols) {
      const float4 v = *reinterpret_cast<const float4*>(sp);
      const uint32_t lo = static_cast<uint32_t>(ToHalfBits(v.x, bf16)) |
                          (static_cast<uint32_t>(ToHalfBits(v.y, bf16)) << 16);
      const uint32_t hi = static_cast<uint32_t>(ToHalfBits(v.z, bf16)) |
                          (static_cast<uint32_t>(ToHalfBits(v.w, bf16)) << 16);
      *reinterpret_cast<uint2*>(dp) = make_uint2(lo, hi);
    } else {
      for (int64_t k = 0; k < 4 && c + k < cols; ++k) {
        dp[k] = ToHalfBits(sp[k], bf16);
      }
    }
  }
}

// One thread per group of 32 consecutive values of a row (a quantized
// block): one 16-64 byte read, 64 contiguous bytes written.
__global__ void DequantKernel(WType type, const uint8_t* w, int64_t rows,
                              int64_t cols, int64_t row_bytes, bool bf16,
                              uint16_t* dst, bool vec_store) {
  const int64_t gpr = (cols + 31) / 32;
  const int64_t n = rows * gpr;
  for (int64_t idx =
           blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       idx < n; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / gpr, g = idx - r * gpr;
    const uint8_t* row = w + r * row_bytes;
    const int64_t c0 = g * 32;
    const int cnt = cols - c0 < 32 ? static_cast<int>(cols - c0) : 32;
    float v[32];
    if (type == WType::kQ8_0) {
      const uint8_t* blk = row + g * 34;
      const float d = internal::F16Bits(internal::LoadU16(blk));
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        v[j] = d * static_cast<float>(static_cast<int8_t>(blk[2 + j]));
      }
    } else if (type == WType::kQ4_0 || type == WType::kQ4_1) {
      const bool q41 = type == WType::kQ4_1;
      const uint8_t* blk = row + g * (q41 ? 20 : 18);
      const float d = internal::F16Bits(internal::LoadU16(blk));
      const float m = q41 ? internal::F16Bits(internal::LoadU16(blk + 2)) : 0.f;
      const uint8_t* qs = blk + (q41 ? 4 : 2);
      const int off = q41 ? 0 : 8;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int q = qs[j];
        v[j] = d * static_cast<float>((q & 15) - off) + m;
        v[j + 16] = d * static_cast<float>((q >> 4) - off) + m;
      }
    } else {
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        v[j] = j < cnt ? internal::LoadElement(type, row, c0 + j) : 0.0f;
      }
    }
    uint16_t* o = dst + r * cols + c0;
    if (vec_store && cnt == 32) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        uint32_t p[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          p[e] = static_cast<uint32_t>(ToHalfBits(v[8 * k + 2 * e], bf16)) |
                 (static_cast<uint32_t>(ToHalfBits(v[8 * k + 2 * e + 1], bf16))
                  << 16);
        }
        reinterpret_cast<uint4*>(o)[k] = make_uint4(p[0], p[1], p[2], p[3]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        if (j < cnt) o[j] = ToHalfBits(v[j], bf16);
      }
    }
  }
}

unsigned Blocks(int64_t n) {
  const int64_t b = internal::CeilDiv(n, 256);
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 16 ? 65535 * 16 : b));
}

const char* BlasName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "CUBLAS_STATUS_(other)";
  }
}

bool IsHalf(WType t) { return t == WType::kBF16 || t == WType::kF16; }

}  // namespace

cudaError_t ConvertF32ToHalf(const float* src, int64_t src_stride, int64_t rows,
                             int64_t cols, HalfType type, void* dst,
                             int64_t dst_stride, cudaStream_t stream) {
  if (src == nullptr || dst == nullptr || rows < 0 || cols < 0 ||
      src_stride < cols || dst_stride < cols ||
      (type != HalfType::kBF16 && type != HalfType::kF16) ||
      !internal::Aligned(dst, 2)) {
    return Fail("ConvertF32ToHalf: %lld x %lld, strides %lld/%lld, type %d",
                static_cast<long long>(rows), static_cast<long long>(cols),
                static_cast<long long>(src_stride),
                static_cast<long long>(dst_stride), static_cast<int>(type));
  }
  if (rows * cols == 0) return cudaSuccess;
  const bool vec = internal::Aligned(src, 16) && internal::Aligned(dst, 8) &&
                   src_stride % 4 == 0 && dst_stride % 4 == 0;
  ConvertKernel<<<Blocks(rows * internal::CeilDiv(cols, 4)), 256, 0, stream>>>(
      src, src_stride, rows, cols, type == HalfType::kBF16,
      static_cast<uint16_t*>(dst), dst_stride, vec);
  return CheckLaunch("ConvertF32ToHalf");
}

cudaError_t DequantizeToHalf(const DeviceMatrix& w, HalfType type, void* dst,
                             cudaStream_t stream) {
  if (cudaError_t e = internal::CheckMatrix(w, "DequantizeToHalf");
      e != cudaSuccess) {
    return e;
  }
  if (dst == nullptr || !internal::Aligned(dst, 2) ||
      (type != HalfType::kBF16 && type != HalfType::kF16)) {
    return Fail("DequantizeToHalf: null/misaligned dst or type %d",
                static_cast<int>(type));
  }
  const bool vec_store = internal::Aligned(dst, 16) && w.cols % 8 == 0;
  DequantKernel<<<Blocks(w.rows * internal::CeilDiv(w.cols, 32)), 256, 0,
                  stream>>>(w.type, static_cast<const uint8_t*>(w.data), w.rows,
                            w.cols, w.row_bytes, type == HalfType::kBF16,
                            static_cast<uint16_t*>(dst), vec_store);
  return CheckLaunch("DequantizeToHalf");
}

CublasGemm::~CublasGemm() {
  if (handle_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

cudaError_t CublasGemm::Init() {
  if (handle_ != nullptr) return cudaSuccess;
  cublasHandle_t h = nullptr;
  const cublasStatus_t s = cublasCreate(&h);
  if (s != CUBLAS_STATUS_SUCCESS) {
    return internal::FailWith(cudaErrorInitializationError,
                              "CublasGemm::Init: cublasCreate: %s",
                              BlasName(s));
  }
  // The exact path for f32 weights: never TF32.
  cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
  handle_ = h;
  return cudaSuccess;
}

int64_t CublasGemm::ScratchBytes(WType type, int64_t cols, int64_t n_tokens) {
  if (!IsHalf(type)) return 0;
  return (cols * n_tokens * 2 + 15) / 16 * 16;
}

cudaError_t CublasGemm::Run(const DeviceMatrix& w, const float* x,
                            int64_t x_stride, int64_t n_tokens, float* y,
                            int64_t y_stride, void* scratch,
                            int64_t scratch_bytes, cudaStream_t stream) {
  if (cudaError_t e = internal::CheckMatrix(w, "CublasGemm::Run");
      e != cudaSuccess) {
    return e;
  }
  if (handle_ == nullptr) return Fail("CublasGemm::Run: Init not called");
  if (w.type != WType::kF32 && !IsHalf(w.type)) {
    return Fail("CublasGemm::Run: %s weights (DequantizeToHalf first)",
                internal::TypeName(w.type));
  }
  if (x == nullptr || y == nullptr || n_tokens < 1 || x_stride < w.cols ||
      y_stride < w.rows || w.rows > 0x7fffffff || w.cols > 0x7fffffff ||
      n_tokens > 0x7fffffff) {
    return Fail(
        "CublasGemm::Run: %lld tokens, x_stride %lld (cols %lld), "
        "y_stride %lld (rows %lld)",
        static_cast<long long>(n_tokens), static_cast<long long>(x_stride),
        static_cast<long long>(w.cols), static_cast<long long>(y_stride),
        static_cast<long long>(w.rows));
  }
  if (IsHalf(w.type)) {
    const int64_t need = ScratchBytes(w.type, w.cols, n_tokens);
    if (scratch == nullptr || scratch_bytes < need ||
        !internal::Aligned(scratch, 16)) {
      return Fail(
          "CublasGemm::Run: scratch %p of %lld bytes, need %lld "
          "(16-byte aligned)",
          scratch, static_cast<long long>(scratch_bytes),
          static_cast<long long>(need));
    }
    const HalfType ht =
        w.type == WType::kBF16 ? HalfType::kBF16 : HalfType::kF16;
    if (cudaError_t e = ConvertF32ToHalf(x, x_stride, n_tokens, w.cols, ht,
                                         scratch, w.cols, stream);
        e != cudaSuccess) {
      return e;
    }
    return RunHalf(w, scratch, w.cols, n_tokens, y, y_stride, stream);
  }
  auto h = static_cast<cublasHandle_t>(handle_);
  cublasSetStream(h, stream);
  const float alpha = 1.0f, beta = 0.0f;
  // Column-major view: C[rows x n] = W^T' * X, W stored as [cols x rows].
  const cublasStatus_t s =
      cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows),
                   static_cast<int>(n_tokens), static_cast<int>(w.cols), &alpha,
                   w.data, CUDA_R_32F, static_cast<int>(w.row_bytes / 4), x,
                   CUDA_R_32F, static_cast<int>(x_stride), &beta, y, CUDA_R_32F,
                   static_cast<int>(y_stride), CUBLAS_COMPUTE_32F_PEDANTIC,
                   CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) {
    return internal::FailWith(
        cudaErrorLaunchFailure, "CublasGemm::Run f32 %lld x %lld x %lld: %s",
        static_cast<long long>(w.rows), static_cast<long long>(w.cols),
        static_cast<long long>(n_tokens), BlasName(s));
  }
  return cudaSuccess;
}

cudaError_t CublasGemm::RunHalf(const DeviceMatrix& w, const void* x_half,
                                int64_t x_stride, int64_t n_tokens, float* y,
                                int64_t y_stride, cudaStream_t stream) {
  if (cudaError_t e = internal::CheckMatrix(w, "CublasGemm::RunHalf");
      e != cudaSuccess) {
    return e;
  }
  if (handle_ == nullptr) return Fail("CublasGemm::RunHalf: Init not called");
  if (!IsHalf(w.type) || x_half == nullptr || y == nullptr || n_tokens < 1 ||
      x_stride < w.cols || y_stride < w.rows || w.rows > 0x7fffffff ||
      w.cols > 0x7fffffff || n_tokens > 0x7fffffff) {
    return Fail(
        "CublasGemm::RunHalf: %s weights %lld x %lld, %lld tokens, "
        "x_stride %lld, y_stride %lld",
        internal::TypeName(w.type), static_cast<long long>(w.rows),
        static_cast<long long>(w.cols), static_cast<long long>(n_tokens),
        static_cast<long long>(x_stride), static_cast<long long>(y_stride));
  }
  auto h = static_cast<cublasHandle_t>(handle_);
  cublasSetStream(h, stream);
  const cudaDataType_t t = w.type == WType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t s = cublasGemmEx(
      h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows),
      static_cast<int>(n_tokens), static_cast<int>(w.cols), &alpha, w.data, t,
      static_cast<int>(w.row_bytes / 2), x_half, t, static_cast<int>(x_stride),
      &beta, y, CUDA_R_32F, static_cast<int>(y_stride), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) {
    return internal::FailWith(
        cudaErrorLaunchFailure, "CublasGemm::RunHalf %s %lld x %lld x %lld: %s",
        internal::TypeName(w.type), static_cast<long long>(w.rows),
        static_cast<long long>(w.cols), static_cast<long long>(n_tokens),
        BlasName(s));
  }
  return cudaSuccess;
}

}  // namespace cuda
}  // namespace pdserve
