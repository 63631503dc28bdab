// cuBLAS shims for the CPU emulation: GemmEx / GemmStridedBatchedEx computed
// naively in double (column-major, both ops), on the handle's stream (so a
// call on a capturing stream is recorded and replayed; alpha/beta are read at
// call time, as with CUBLAS_POINTER_MODE_HOST). TF32 compute (FAST_TF32, or
// TF32 math mode with f32 compute) rounds A and B to 10-bit mantissas.
// Leading dimensions are validated as cuBLAS does (INVALID_VALUE).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

namespace emu {
cudaError_t Enqueue(cudaStream_t stream, std::function<void()> work,
                    const char* what);
bool IsDevice(const void* p);
void Violation(const std::string& what);
}  // namespace emu

namespace {
struct Handle {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};
float Tf32(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7f800000u) == 0x7f800000u) return f;
  b += 0x1000u;  // round half away (cvt.rna.tf32)
  b &= 0xffffe000u;
  std::memcpy(&f, &b, 4);
  return f;
}
float Get(const void* p, cudaDataType t, int64_t i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
  const uint16_t u = static_cast<const uint16_t*>(p)[i];
  if (t == CUDA_R_16BF) {
    const uint32_t b = uint32_t(u) << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
  return __half2float(__ushort_as_half(u));
}
bool Known(cudaDataType t) {
  return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF;
}

cublasStatus_t Gemm(cublasHandle_t handle, cublasOperation_t ta,
                    cublasOperation_t tb, int m, int n, int k,
                    const void* alpha, const void* A, cudaDataType at, int lda,
                    long long sa, const void* B, cudaDataType bt, int ldb,
                    long long sb, const void* beta, void* C, cudaDataType ct,
                    int ldc, long long sc, int batch, cublasComputeType_t comp,
                    const char* what) {
  auto* h = reinterpret_cast<Handle*>(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || ct != CUDA_R_32F || !Known(at) ||
      !Known(bt) || at != bt) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const int need_a = ta == CUBLAS_OP_N ? m : k;
  const int need_b = tb == CUBLAS_OP_N ? k : n;
  if (lda < (need_a > 1 ? need_a : 1) || ldb < (need_b > 1 ? need_b : 1) ||
      ldc < (m > 1 ? m : 1)) {
    char buf[200];
    std::snprintf(buf, sizeof(buf),
                  "%s: m %d n %d k %d lda %d ldb %d ldc %d -> INVALID_VALUE",
                  what, m, n, k, lda, ldb, ldc);
    emu::Violation(buf);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  for (const void* p : {A, B, static_cast<const void*>(C)}) {
    if (!emu::IsDevice(p)) {
      emu::Violation(std::string(what) + ": matrix pointer not device memory");
    }
  }
  const bool tf32 = comp == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                    (comp == CUBLAS_COMPUTE_32F && at == CUDA_R_32F &&
                     (h->math & CUBLAS_TF32_TENSOR_OP_MATH) != 0);
  const float a = *static_cast<const float*>(alpha);
  const float b = *static_cast<const float*>(beta);
  const int64_t ea = at == CUDA_R_32F ? 4 : 2, eb = ea;
  auto work = [=]() {
    for (int q = 0; q < batch; ++q) {
      const char* Aq = static_cast<const char*>(A) + q * sa * ea;
      const char* Bq = static_cast<const char*>(B) + q * sb * eb;
      float* Cq = static_cast<float*>(C) + q * sc;
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < m; ++i) {
          double s = 0;
          for (int l = 0; l < k; ++l) {
            float av = ta == CUBLAS_OP_N ? Get(Aq, at, i + int64_t(l) * lda)
                                         : Get(Aq, at, l + int64_t(i) * lda);
            float bv = tb == CUBLAS_OP_N ? Get(Bq, bt, l + int64_t(j) * ldb)
                                         : Get(Bq, bt, j + int64_t(l) * ldb);
            if (tf32) {
              av = Tf32(av);
              bv = Tf32(bv);
            }
            s += double(av) * bv;
          }
          float* c = Cq + i + int64_t(j) * ldc;
          *c = float(a * s + (b != 0 ? b * *c : 0));
        }
      }
    }
  };
  return emu::Enqueue(h->stream, work, what) == cudaSuccess
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_EXECUTION_FAILED;
}
}  // namespace

extern "C" {
cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
  *h = reinterpret_cast<cublasHandle_t>(new Handle());
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  delete reinterpret_cast<Handle*>(h);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  reinterpret_cast<Handle*>(h)->math = m;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto* hh = reinterpret_cast<Handle*>(h);
  hh->stream = s;
  hh->workspace = nullptr;  // as cuBLAS: back to the default pool
  hh->workspace_bytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void* w, size_t n) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto* hh = reinterpret_cast<Handle*>(h);
  hh->workspace = w;
  hh->workspace_bytes = n;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta,
                            cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType at,
                            int lda, const void* B, cudaDataType bt, int ldb,
                            const void* beta, void* C, cudaDataType ct, int ldc,
                            cublasComputeType_t comp, cublasGemmAlgo_t) {
  return Gemm(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C,
              ct, ldc, 0, 1, comp, "cublasGemmEx");
}
cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
    int k, const void* alpha, const void* A, cudaDataType at, int lda,
    long long sa, const void* B, cudaDataType bt, int ldb, long long sb,
    const void* beta, void* C, cudaDataType ct, int ldc, long long sc,
    int batch, cublasComputeType_t comp, cublasGemmAlgo_t) {
  return Gemm(h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta,
              C, ct, ldc, sc, batch, comp, "cublasGemmStridedBatchedEx");
}
}
