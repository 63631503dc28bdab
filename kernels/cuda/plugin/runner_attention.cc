// CudaRunner::GemmAttention: attention of one long span as cuBLAS GEMMs on
// TF32 tensor cores. Per KV head j (q heads j*g .. j*g+g-1, strided batch):
//   S_h = scale * Q_h K_j^T   [rows][kv_len]
//   P_h = causal softmax(S_h) (in place)
//   O_h = P_h V_j             [rows][head_dim] into attn_
// Keys/values come from the paged cache (gathered into kc_/vc_), so chunked
// prefill (start_pos > 0) works too. The causal half of S is computed and
// discarded: 2x the minimal FLOPs, still far faster than the f32 SIMT kernel
// for long prompts.
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
constexpr int64_t kMaxGatherKeys = 32768;

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
  const int64_t group = c.num_heads / c.num_kv_heads;
  // Room for at least one KV group at the longest span and context.
  scores_bytes_ =
      std::min(kScoresBudget, c.num_heads * max_tokens_ * kv_cap_ * 4);
  scores_bytes_ = std::max(scores_bytes_, group * min_rows * min_rows * 4);
  void *p = nullptr;
  PDSERVE_RETURN_IF_ERROR(Allocate(&p, scores_bytes_, "attention scores"));
  scores_ = static_cast<float *>(p);
  PDSERVE_RETURN_IF_ERROR(
      Allocate(&p, kv_cap_ * c.kv_dim() * 4, "gathered keys"));
  kc_ = static_cast<float *>(p);
  PDSERVE_RETURN_IF_ERROR(
      Allocate(&p, kv_cap_ * c.kv_dim() * 4, "gathered values"));
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
  const int64_t group = config_.num_heads / config_.num_kv_heads;
  return group * plan.rows * plan.kv_bound * 4 <= scores_bytes_;
}

absl::Status CudaRunner::GemmAttention(const StepPlan &plan, int64_t layer) {
  const ModelConfig &c = config_;
  const int64_t rows = plan.rows, kv_len = plan.kv_bound;
  const int64_t hd = c.head_dim, qd = c.q_dim(), kvd = c.kv_dim();
  const int64_t group = c.num_heads / c.num_kv_heads;
  PDSERVE_CUDA_RETURN_IF_ERROR(
      GatherKv(kv_, layer, plan.attn, kv_len, kc_, vc_, compute_));
  auto h = static_cast<cublasHandle_t>(attn_blas_);
  PDSERVE_RETURN_IF_ERROR(
      BlasStatus(cublasSetStream(h, compute_), "cublasSetStream"));
  const int64_t per_head = rows * kv_len;
  // Whole KV groups per chunk of the scores buffer.
  const int64_t kv_heads_per_chunk =
      std::max<int64_t>(1, scores_bytes_ / (group * per_head * 4));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float one = 1.0f, zero = 0.0f;
  const int m_kv = static_cast<int>(kv_len), n_rows = static_cast<int>(rows);
  for (int64_t j0 = 0; j0 < c.num_kv_heads; j0 += kv_heads_per_chunk) {
    const int64_t j1 = std::min(c.num_kv_heads, j0 + kv_heads_per_chunk);
    for (int64_t j = j0; j < j1; ++j) {
      float *s = scores_ + (j - j0) * group * per_head;
      PDSERVE_RETURN_IF_ERROR(BlasStatus(
          cublasGemmStridedBatchedEx(
              h, CUBLAS_OP_T, CUBLAS_OP_N, m_kv, n_rows, static_cast<int>(hd),
              &scale, kc_ + j * hd, CUDA_R_32F, static_cast<int>(kvd), 0,
              qkv_ + j * group * hd, CUDA_R_32F, static_cast<int>(qkv_width_),
              hd, &zero, s, CUDA_R_32F, m_kv, per_head, static_cast<int>(group),
              CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
          "attention scores GEMM"));
    }
    PDSERVE_CUDA_RETURN_IF_ERROR(CausalSoftmax(scores_, (j1 - j0) * group, rows,
                                               kv_len, plan.attn.start_pos,
                                               compute_));
    for (int64_t j = j0; j < j1; ++j) {
      const float *p = scores_ + (j - j0) * group * per_head;
      PDSERVE_RETURN_IF_ERROR(BlasStatus(
          cublasGemmStridedBatchedEx(
              h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(hd), n_rows, m_kv,
              &one, vc_ + j * hd, CUDA_R_32F, static_cast<int>(kvd), 0, p,
              CUDA_R_32F, m_kv, per_head, &zero, attn_ + j * group * hd,
              CUDA_R_32F, static_cast<int>(qd), hd, static_cast<int>(group),
              CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
          "attention values GEMM"));
    }
  }
  return absl::OkStatus();
}

}  // namespace pdserve::cuda_runner
