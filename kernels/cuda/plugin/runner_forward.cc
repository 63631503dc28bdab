// CudaRunner's forward pass: the kernels of one step, in order, on compute_.
// Nothing here allocates, synchronises or copies between host and device, so
// a decode step can be captured as a CUDA graph.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/plugin/cuda_check.h"
#include "kernels/cuda/plugin/plugin_kernels.h"
#include "kernels/cuda/plugin/runner_internal.h"

namespace pdserve::cuda_runner {
namespace {

bool IsQuantized(cuda::WType t) {
  return t == cuda::WType::kQ8_0 || t == cuda::WType::kQ4_0 ||
         t == cuda::WType::kQ4_1;
}

}  // namespace

absl::Status CudaRunner::Linear(const cuda::DeviceMatrix& w, const float* x,
                                int64_t x_stride, int64_t n, float* y,
                                int64_t y_stride) {
  // Quantized weights: chunked MatVec reads the packed weights n / 8 times,
  // still cheaper than dequantizing to bf16 until a few chunks.
  const int64_t matvec_limit =
      IsQuantized(w.type) ? std::max<int64_t>(options_.matvec_max_tokens, 32)
                          : options_.matvec_max_tokens;
  if (n <= matvec_limit || gemm_scratch_ == nullptr) {
    for (int64_t t = 0; t < n; t += cuda::kMaxMatVecTokens) {
      const int64_t m = std::min<int64_t>(cuda::kMaxMatVecTokens, n - t);
      PDSERVE_CUDA_RETURN_IF_ERROR(cuda::MatVec(w, x + t * x_stride, x_stride,
                                                m, y + t * y_stride, y_stride,
                                                compute_));
    }
    return absl::OkStatus();
  }
  if (IsQuantized(w.type)) {
    // The bf16 copy converted at creation, else dequantized now.
    cuda::DeviceMatrix h = model_->GemmCopy(w);
    if (h.data == nullptr) {
      if (dequant_ == nullptr) {
        return absl::InternalError("no dequantization scratch for a GEMM");
      }
      PDSERVE_CUDA_RETURN_IF_ERROR(
          cuda::DequantizeToHalf(w, cuda::HalfType::kBF16, dequant_, compute_));
      ++per_step_dequant_;
      h.type = cuda::WType::kBF16;
      h.rows = w.rows;
      h.cols = w.cols;
      h.row_bytes = w.cols * 2;
      h.data = dequant_;
    }
    PDSERVE_CUDA_RETURN_IF_ERROR(gemm_.Run(h, x, x_stride, n, y, y_stride,
                                           gemm_scratch_, gemm_scratch_bytes_,
                                           compute_));
    return absl::OkStatus();
  }
  PDSERVE_CUDA_RETURN_IF_ERROR(gemm_.Run(w, x, x_stride, n, y, y_stride,
                                         gemm_scratch_, gemm_scratch_bytes_,
                                         compute_));
  return absl::OkStatus();
}

CudaRunner::AttnKind CudaRunner::ChooseAttention(const StepPlan& plan) const {
  const int32_t hd = shape_.head_dim;
  const bool library = hd == 64 || hd == 128 || hd == 256;
  if (plan.seqs > 65535) return AttnKind::kFallback;
  if (plan.decode) {
    if (!library) return AttnKind::kFallback;
    // 0 bytes: one split per sequence, no partials to combine.
    const int64_t need = cuda::DecodeAttentionWorkspaceBytes(
        shape_, static_cast<int32_t>(plan.seqs),
        static_cast<int32_t>(plan.kv_bound));
    return need <= decode_ws_bytes_ ? AttnKind::kDecode : AttnKind::kPrefill;
  }
  const int64_t flash_rows = options_.flash_attention_min_rows;
  if (flash_rows > 0 && plan.rows >= flash_rows && hd <= 256) {
    return AttnKind::kFlash;
  }
  return library ? AttnKind::kPrefill : AttnKind::kFallback;
}

absl::Status CudaRunner::Attention(const StepPlan& plan, AttnKind kind,
                                   int64_t layer) {
  const int64_t qd = config_.q_dim();
  switch (kind) {
    case AttnKind::kDecode:
      PDSERVE_CUDA_RETURN_IF_ERROR(cuda::DecodeAttention(
          kv_, layer, plan.attn, shape_, qkv_, qkv_width_, attn_, qd,
          decode_ws_, decode_ws_bytes_, compute_));
      break;
    case AttnKind::kPrefill:
      PDSERVE_CUDA_RETURN_IF_ERROR(
          cuda::PrefillAttention(kv_, layer, plan.attn, shape_, qkv_,
                                 qkv_width_, attn_, qd, compute_));
      break;
    case AttnKind::kFlash:
      PDSERVE_CUDA_RETURN_IF_ERROR(
          cuda::FlashPrefillAttention(kv_, layer, plan.attn, shape_, qkv_,
                                      qkv_width_, attn_, qd, compute_));
      break;
    case AttnKind::kFallback:
      PDSERVE_CUDA_RETURN_IF_ERROR(FallbackAttention(kv_, layer, plan.attn,
                                                     shape_, qkv_, qkv_width_,
                                                     attn_, qd, compute_));
      break;
  }
  return absl::OkStatus();
}

absl::Status CudaRunner::EnqueueLayers(const StepPlan& plan) {
  const ModelConfig& c = config_;
  const int64_t rows = plan.rows;
  const int64_t hidden = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim();
  const int64_t inter = c.intermediate_size;
  const float eps = c.rms_norm_eps;
  const AttnKind attn_kind = ChooseAttention(plan);
  PDSERVE_CUDA_RETURN_IF_ERROR(cuda::EmbeddingGather(
      model_->embedding, plan.tokens, rows, x_, hidden, compute_));
  PDSERVE_CUDA_RETURN_IF_ERROR(cuda::RopeCosSin(
      plan.positions, rows, c.rope_dims, c.rope_theta, cos_, sin_, compute_));
  QkvPrep prep;
  prep.qkv = qkv_;
  prep.stride = qkv_width_;
  prep.num_heads = static_cast<int32_t>(c.num_heads);
  prep.num_kv_heads = static_cast<int32_t>(c.num_kv_heads);
  prep.head_dim = static_cast<int32_t>(c.head_dim);
  prep.half = static_cast<int32_t>(c.rope_dims / 2);
  prep.neox = c.rope_style == RopeStyle::kNeox;
  prep.eps = eps;
  prep.cos = cos_;
  prep.sin = sin_;
  const int64_t gw = 2 * inter;  // gu_ row: [gate | up]
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const DeviceLayer& lw = model_->layers[l];
    // x += previous layer's FFN output; xn = norm(x).
    PDSERVE_CUDA_RETURN_IF_ERROR(
        cuda::RmsNormResidual(x_, l == 0 ? nullptr : proj_, lw.attn_norm, eps,
                              rows, hidden, hidden, xn_, compute_));
    if (lw.wqkv.data != nullptr) {
      PDSERVE_RETURN_IF_ERROR(
          Linear(lw.wqkv, xn_, hidden, rows, qkv_, qkv_width_));
    } else {
      PDSERVE_RETURN_IF_ERROR(
          Linear(lw.wq, xn_, hidden, rows, qkv_, qkv_width_));
      PDSERVE_RETURN_IF_ERROR(
          Linear(lw.wk, xn_, hidden, rows, qkv_ + qd, qkv_width_));
      PDSERVE_RETURN_IF_ERROR(
          Linear(lw.wv, xn_, hidden, rows, qkv_ + qd + kvd, qkv_width_));
    }
    prep.q_norm = c.qk_norm ? lw.q_norm : nullptr;
    prep.k_norm = c.qk_norm ? lw.k_norm : nullptr;
    PDSERVE_CUDA_RETURN_IF_ERROR(
        QkNormRopeStore(prep, kv_, l, plan.attn, compute_));
    PDSERVE_RETURN_IF_ERROR(Attention(plan, attn_kind, l));
    PDSERVE_RETURN_IF_ERROR(Linear(lw.wo, attn_, qd, rows, proj_, hidden));
    // x += attention output; xn = norm(x).
    PDSERVE_CUDA_RETURN_IF_ERROR(cuda::RmsNormResidual(
        x_, proj_, lw.ffn_norm, eps, rows, hidden, hidden, xn_, compute_));
    if (lw.w_gate_up.data != nullptr) {
      PDSERVE_RETURN_IF_ERROR(Linear(lw.w_gate_up, xn_, hidden, rows, gu_, gw));
    } else {
      PDSERVE_RETURN_IF_ERROR(Linear(lw.w_gate, xn_, hidden, rows, gu_, gw));
      PDSERVE_RETURN_IF_ERROR(
          Linear(lw.w_up, xn_, hidden, rows, gu_ + inter, gw));
    }
    PDSERVE_CUDA_RETURN_IF_ERROR(
        cuda::SwiGlu(gu_, gw, gu_ + inter, gw, rows, inter, gu_, gw, compute_));
    PDSERVE_RETURN_IF_ERROR(Linear(lw.w_down, gu_, gw, rows, proj_, hidden));
  }
  PDSERVE_CUDA_RETURN_IF_ERROR(
      cuda::AddInPlace(x_, proj_, rows * hidden, compute_));
  return absl::OkStatus();
}

absl::Status CudaRunner::EnqueueHead(const StepPlan& plan, int64_t first,
                                     int64_t n, int buf) {
  if (n <= 0) return absl::OkStatus();
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, vocab = c.vocab_size;
  PDSERVE_CUDA_RETURN_IF_ERROR(GatherRows(x_, hidden, plan.rows,
                                          plan.logit_src + first, n, hidden,
                                          head_x_, hidden, compute_));
  PDSERVE_CUDA_RETURN_IF_ERROR(cuda::RmsNormResidual(
      head_x_, nullptr, model_->output_norm, c.rms_norm_eps, n, hidden, hidden,
      head_xn_, compute_));
  PDSERVE_RETURN_IF_ERROR(
      Linear(model_->lm_head, head_xn_, hidden, n, logits_[buf], vocab));
  if (plan.sample) {
    // Sampling rows are one per sequence, in order: row `first + i` is
    // sequence first + i.
    PDSERVE_CUDA_RETURN_IF_ERROR(
        cuda::SampleRows(logits_[buf], n, vocab, vocab, plan.params + first,
                         sampled_ + first, logprobs_ + first, compute_));
  }
  return absl::OkStatus();
}

}  // namespace pdserve::cuda_runner
