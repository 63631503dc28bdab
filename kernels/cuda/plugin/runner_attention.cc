// CudaRunner::GemmAttention: attention of one long span as cuBLAS GEMMs on
// TF32 tensor cores. Keys/values of positions [0, kv_len) are gathered out
// of the paged cache head-major and expanded to the query heads (so chunked
// prefill, start_pos > 0, works, and every GEMM is one strided batch over
// the query heads). Then per chunk of query rows [r0, r1), over the keys
// [0, start + r1) that chunk can see (skipping most of the causal upper
// triangle):
//   S_h = scale * Q_h K_h^T   [rows][keys]   (one strided-batched GEMM)
//   P_h = causal softmax(S_h) (in place)
//   O_h = P_h V_h             into attn_      (one strided-batched GEMM)
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/plugin/cuda_check.h"
#include "kernels/cuda/plugin/plugin_kernels.h"
#include "kernels/cuda/plugin/runner_internal.h"

namespace pdserve::cuda_runner {
namespace {

constexpr int64_t kScoresBudget = int64_t{1} << 30;  // bytes
constexpr int64_t kMaxGatherKeys = 16384;

absl::Status BlasStatus(cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": cuBLAS status ", static_cast<int>(s)));
}

}  // namespace

absl::Status CudaRunner::InitGemmAttention() {
  const int64_t min_rows = options_.gemm_attention_min_rows;
  if (min_rows <= 0 || max_tokens_ < min_rows) return absl::OkStatus();
  const ModelConfig &c = config_;
  kv_cap_ = std::min(max_positions_, kMaxGatherKeys);
  if (kv_cap_ < min_rows) return absl::OkStatus();
  // Scores of one chunk of rows for every head.
  const int64_t chunk = std::max<int64_t>(1, options_.gemm_attention_chunk);
  scores_bytes_ = std::min(
      kScoresBudget, c.num_heads * std::min(chunk, max_tokens_) * kv_cap_ * 4);
  void *p = nullptr;
  PDSERVE_RETURN_IF_ERROR(Allocate(&p, scores_bytes_, "attention scores"));
  scores_ = static_cast<float *>(p);
  const int64_t expanded = c.num_heads * kv_cap_ * c.head_dim * 4;
  PDSERVE_RETURN_IF_ERROR(Allocate(&p, expanded, "gathered keys"));
  kc_ = static_cast<float *>(p);
  PDSERVE_RETURN_IF_ERROR(Allocate(&p, expanded, "gathered values"));
  vc_ = static_cast<float *>(p);
  cublasHandle_t h = nullptr;
  PDSERVE_RETURN_IF_ERROR(BlasStatus(cublasCreate(&h), "cublasCreate"));
  attn_blas_ = h;
  return absl::OkStatus();
}

bool CudaRunner::GemmAttentionFits(const StepPlan &plan) const {
  if (attn_blas_ == nullptr || plan.graph || plan.real_seqs != 1 ||
      plan.rows < options_.gemm_attention_min_rows || plan.kv_bound > kv_cap_) {
    return false;
  }
  // At least one row of scores for every head.
  return config_.num_heads * plan.kv_bound * 4 <= scores_bytes_;
}

absl::Status CudaRunner::GemmAttention(const StepPlan &plan, int64_t layer) {
  const ModelConfig &c = config_;
  const int64_t rows = plan.rows, kv_len = plan.kv_bound;
  const int64_t start = kv_len - rows;  // one span: kv_bound = start + rows
  const int64_t hd = c.head_dim, qd = c.q_dim(), nh = c.num_heads;
  const int64_t head_stride = kv_cap_ * hd;  // expanded K/V per head
  PDSERVE_CUDA_RETURN_IF_ERROR(GatherKvExpanded(
      kv_, layer, plan.attn, kv_len, static_cast<int32_t>(nh),
      static_cast<int32_t>(hd), head_stride, kc_, vc_, compute_));
  auto h = static_cast<cublasHandle_t>(attn_blas_);
  PDSERVE_RETURN_IF_ERROR(
      BlasStatus(cublasSetStream(h, compute_), "cublasSetStream"));
  // Rows per chunk: the option, cut so the scores of every head fit.
  const int64_t chunk =
      std::max<int64_t>(1, std::min(options_.gemm_attention_chunk,
                                    scores_bytes_ / (nh * kv_len * 4)));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float one = 1.0f, zero = 0.0f;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t n = std::min(chunk, rows - r0);
    const int64_t keys = start + r0 + n;  // visible to the chunk's last row
    const int ki = static_cast<int>(keys), ni = static_cast<int>(n);
    // S_h (col-major [keys][n]) = K_h (as [hd][keys])^T * Q_h ([hd][n]).
    PDSERVE_RETURN_IF_ERROR(BlasStatus(
        cublasGemmStridedBatchedEx(
            h, CUBLAS_OP_T, CUBLAS_OP_N, ki, ni, static_cast<int>(hd), &scale,
            kc_, CUDA_R_32F, static_cast<int>(hd), head_stride,
            qkv_ + r0 * qkv_width_, CUDA_R_32F, static_cast<int>(qkv_width_),
            hd, &zero, scores_, CUDA_R_32F, ki, n * keys, static_cast<int>(nh),
            CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
        "attention scores GEMM"));
    PDSERVE_CUDA_RETURN_IF_ERROR(
        CausalSoftmax(scores_, nh, n, keys, r0, plan.attn.start_pos, compute_));
    // O_h (col-major [hd][n], rows qd apart) = V_h ([hd][keys]) * P_h.
    PDSERVE_RETURN_IF_ERROR(BlasStatus(
        cublasGemmStridedBatchedEx(
            h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(hd), ni, ki, &one,
            vc_, CUDA_R_32F, static_cast<int>(hd), head_stride, scores_,
            CUDA_R_32F, ki, n * keys, &zero, attn_ + r0 * qd, CUDA_R_32F,
            static_cast<int>(qd), hd, static_cast<int>(nh),
            CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
        "attention values GEMM"));
  }
  return absl::OkStatus();
}

}  // namespace pdserve::cuda_runner
