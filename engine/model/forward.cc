#include "engine/model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/model/attention.h"
#include "engine/model/attention_tiled.h"
#include "engine/model/image_tokens.h"
#include "engine/model/mrope.h"
#include "engine/model/span_validation.h"
#include "kernels/matmul.h"
#include "kernels/matmul_grouped.h"
#include "kernels/ops.h"

namespace pdserve {
namespace {

// Query rows per attention work item: small enough to balance threads on a
// single long prefill, large enough to amortise the scheduling.
constexpr int64_t kAttnRowChunk = 16;
// Split over the context (16- and 8-bit KV): spans of at most one row chunk
// whose keys span more than one segment are split into one work item per
// segment and kv head, for up to this many rows per step.
constexpr int64_t kMaxSplitRows = 16;

int64_t MatrixBytes(const WeightView& w) {
  return w.empty() ? 0 : w.rows * w.row_bytes;
}
int64_t MatrixMacs(const WeightView& w) {
  return w.empty() ? 0 : w.rows * w.cols;
}

// Rotates the first 2 * half dims of each head like kernels' ApplyRope, with
// cos/sin of this position precomputed (same f32 arithmetic, so the result is
// bitwise identical to ApplyRope).
void RotateHeads(float* x, int64_t n_heads, int64_t head_dim, int64_t half,
                 const float* cos, const float* sin, RopeStyle style) {
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = style == RopeStyle::kNeox ? i : 2 * i;
      const int64_t b = style == RopeStyle::kNeox ? i + half : 2 * i + 1;
      const float x0 = v[a];
      const float x1 = v[b];
      const float c = cos[i];
      const float s = sin[i];
      const float p0 = x0 * c;
      const float p1 = -x1 * s;
      const float p2 = x1 * c;
      const float p3 = x0 * s;
      v[a] = p0 + p1;
      v[b] = p2 + p3;
    }
  }
}

}  // namespace

ForwardStats& ForwardStats::operator+=(const ForwardStats& o) {
  steps += o.steps;
  tokens += o.tokens;
  logit_rows += o.logit_rows;
  weight_bytes_read += o.weight_bytes_read;
  kv_bytes_read += o.kv_bytes_read;
  kv_bytes_written += o.kv_bytes_written;
  flops += o.flops;
  experts_selected += o.experts_selected;
  expert_matrices_read += o.expert_matrices_read;
  return *this;
}

absl::StatusOr<std::unique_ptr<ForwardPass>> ForwardPass::Create(
    const ModelWeights& weights, KvStorage& kv, ThreadPool& pool,
    int64_t max_batch_tokens) {
  const ModelConfig& c = weights.config;
  if (kv.dtype() != KvDType::kF32 && kv.head_dim() != c.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV storage (", KvDTypeName(kv.dtype()), ") has heads of ",
        kv.head_dim(), " elements; model ", c.name, " has head_dim ",
        c.head_dim));
  }
  if (kv.num_layers() != c.num_kv_layers() || kv.kv_dim() != c.kv_dim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV storage has ", kv.num_layers(), " layers of kv_dim ", kv.kv_dim(),
        "; model ", c.name, " needs ", c.num_kv_layers(),
        " layers of kv_dim ", c.kv_dim(),
        c.num_linear_layers() > 0 ? " (its full-attention layers)" : ""));
  }
  if (max_batch_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_tokens must be >= 1, got ", max_batch_tokens));
  }
  if (static_cast<int64_t>(weights.layers.size()) != c.num_layers ||
      c.num_heads <= 0 || c.num_kv_heads <= 0 ||
      c.num_heads % c.num_kv_heads != 0 || c.head_dim <= 0 ||
      c.rope_dims % 2 != 0 || c.rope_dims > c.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", c.name, ": inconsistent shape (", weights.layers.size(),
        " layer weights for ", c.num_layers, " layers, ", c.num_heads,
        " heads, ", c.num_kv_heads, " kv heads, head_dim ", c.head_dim,
        ", rope_dims ", c.rope_dims, ")"));
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = weights.layers[l];
    if (c.IsMoeLayer(l) &&
        (c.num_experts_used < 1 || c.num_experts_used > c.num_experts ||
         c.moe_intermediate_size < 1 || lw.router.empty() ||
         static_cast<int64_t>(lw.experts.size()) != c.num_experts)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model ", c.name, ": MoE layer ", l, " has ", lw.experts.size(),
          " experts (config ", c.num_experts, ", top-", c.num_experts_used,
          ", width ", c.moe_intermediate_size, ")"));
    }
  }
  if (c.num_linear_layers() > 0 &&
      (c.linear_num_k_heads < 1 || c.linear_num_v_heads < 1 ||
       c.linear_num_v_heads % c.linear_num_k_heads != 0 ||
       c.linear_k_head_dim < 1 || c.linear_v_head_dim < 1 ||
       c.linear_conv_kernel < 2 || c.linear_conv_kernel > 16)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", c.name, ": linear attention with ", c.linear_num_k_heads,
        " key heads, ", c.linear_num_v_heads, " value heads, head dims ",
        c.linear_k_head_dim, "/", c.linear_v_head_dim, ", conv kernel ",
        c.linear_conv_kernel, " (value heads must be a multiple of key ",
        "heads, kernel 2..16)"));
  }
  return std::make_unique<ForwardPass>(weights, kv, pool, max_batch_tokens);
}

ForwardPass::ForwardPass(const ModelWeights& weights, KvStorage& kv,
                         ThreadPool& pool, int64_t max_batch_tokens)
    : packed_(PackModelForCpu(weights, pool)),
      weights_(packed_->weights),
      kv_(kv),
      pool_(pool),
      max_tokens_(max_batch_tokens) {
  const ModelConfig& c = weights_.config;
  if (kv.num_layers() != c.num_kv_layers() || kv.kv_dim() != c.kv_dim() ||
      max_batch_tokens < 1) {
    std::abort();  // Create() reports this as an error.
  }
  const int64_t storage_tokens = kv.num_pages() * kv.page_size();
  max_positions_ = c.max_context > 0
                       ? std::min(storage_tokens, c.max_context)
                       : storage_tokens;
  const auto n = static_cast<size_t>(max_tokens_);
  x_.resize(n * c.hidden_size);
  xn_.resize(n * c.hidden_size);
  q_.resize(n * c.q_dim());
  k_.resize(n * c.kv_dim());
  v_.resize(n * c.kv_dim());
  attn_.resize(n * c.q_dim());
  gate_.resize(n * c.intermediate_size);
  up_.resize(n * c.intermediate_size);
  proj_.resize(n * c.hidden_size);
  const int64_t half = c.rope_dims / 2;
  rope_cos_.resize(n * half);
  rope_sin_.resize(n * half);
  inv_freq_.resize(half);
  for (int64_t i = 0; i < half; ++i) {
    // Same f32 formula as kernels' ApplyRope (and transformers).
    const float exponent =
        static_cast<float>(2 * i) / static_cast<float>(c.rope_dims);
    inv_freq_[i] = 1.0f / std::pow(c.rope_theta, exponent);
  }
  row_span_.resize(n);
  row_in_span_.resize(n);
  logit_src_.resize(n);
  span_first_row_.resize(n + 1);
  const int64_t group = c.num_heads / std::max<int64_t>(1, c.num_kv_heads);
  split_ok_ = kv.dtype() != KvDType::kF32 && AttendTiledVectorized(c.head_dim);
  max_segments_ = AttnSegments(max_positions_);
  if (split_ok_) {
    partials_.resize(static_cast<size_t>(kMaxSplitRows * c.num_heads *
                                         max_segments_ *
                                         AttnPartialFloats(c.head_dim)));
    splits_.resize(static_cast<size_t>(kMaxSplitRows * c.num_kv_heads));
  }
  items_.resize((n + n / kAttnRowChunk + 1) * c.num_kv_heads +
                (split_ok_ ? kMaxSplitRows * max_segments_ * c.num_kv_heads
                           : 0));
  scratch_per_thread_ = AttentionScratchFloats(max_positions_, c.head_dim,
                                               kv.dtype(), group);
  scratch_.resize(static_cast<size_t>(pool_.num_threads()) *
                  scratch_per_thread_);
  for (const LayerWeights& lw : weights_.layers) {
    for (const WeightView* w : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate,
                                &lw.w_up, &lw.w_down}) {
      layer_bytes_ += MatrixBytes(*w);
      layer_macs_ += MatrixMacs(*w);
    }
    layer_bytes_ += (2 * c.hidden_size + (c.qk_norm ? 2 * c.head_dim : 0)) *
                    static_cast<int64_t>(sizeof(float));
  }
  layer_bytes_ += c.hidden_size * static_cast<int64_t>(sizeof(float));
  lm_head_bytes_ = MatrixBytes(weights_.lm_head);
  if (c.num_linear_layers() > 0) {
    gdn_ = std::make_unique<GatedDeltaNet>(c, max_tokens_, pool_.num_threads());
    int64_t li = 0;
    for (int64_t l = 0; l < c.num_layers; ++l) {
      linear_before_.push_back(li);
      linear_index_.push_back(c.IsLinearLayer(l) ? li++ : -1);
      const LayerWeights& lw = weights_.layers[l];
      for (const WeightView* w :
           {&lw.lin_qkv, &lw.lin_z, &lw.lin_b, &lw.lin_a, &lw.lin_out}) {
        layer_bytes_ += MatrixBytes(*w);
        layer_macs_ += MatrixMacs(*w);
      }
    }
  }
  if (c.attn_output_gate) {
    qg_.resize(n * 2 * c.q_dim());
    attn_gate_.resize(n * c.q_dim());
  }
  if (c.num_experts > 0) {
    moe_ = std::make_unique<MoeBlock>(c, max_tokens_);
    for (const LayerWeights& lw : weights_.layers) {
      for (const WeightView* w : {&lw.router, &lw.shared.gate, &lw.shared.up,
                                  &lw.shared.down, &lw.shared_gate}) {
        layer_bytes_ += MatrixBytes(*w);
        layer_macs_ += MatrixMacs(*w);
      }
    }
  }
}

ForwardPass::~ForwardPass() = default;

int64_t ForwardPass::LogitRows(absl::Span<const SequenceSpan> batch) {
  int64_t rows = 0;
  for (const SequenceSpan& s : batch) rows += s.logit_rows();
  return rows;
}

absl::Status ForwardPass::Validate(absl::Span<const SequenceSpan> batch,
                                   absl::Span<float> logits) const {
  const ModelConfig& c = weights_.config;
  SpanLimits limits;
  limits.max_positions = max_positions_;
  limits.num_pages = kv_.num_pages();
  limits.page_size = kv_.page_size();
  limits.max_batch_tokens = max_tokens_;
  limits.require_linear_state = true;
  if (absl::Status s = ValidateSpans(batch, c, limits); !s.ok()) return s;
  const int64_t need = LogitRows(batch) * c.vocab_size;
  if (static_cast<int64_t>(logits.size()) < need) {
    return absl::InvalidArgumentError(absl::StrCat(
        "logits buffer holds ", logits.size(), " floats, need ", need, " (",
        LogitRows(batch), " rows of ", c.vocab_size, ")"));
  }
  return absl::OkStatus();
}

absl::Status ForwardPass::Run(absl::Span<const SequenceSpan> batch,
                              absl::Span<float> logits, ForwardStats* stats) {
  if (absl::Status s = Validate(batch, logits); !s.ok()) return s;
  if (batch.empty()) return absl::OkStatus();
  // Row bookkeeping.
  int64_t row = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    span_first_row_[i] = row;
    for (int64_t t = 0; t < batch[i].size(); ++t, ++row) {
      row_span_[row] = static_cast<int32_t>(i);
      row_in_span_[row] = static_cast<int32_t>(t);
    }
  }
  span_first_row_[batch.size()] = row;
  rows_ = row;
  if (moe_) moe_->ResetCounters();
  for (const SequenceSpan& s : batch) {  // a new sequence's state is zero
    if (s.linear_state != nullptr && s.start_pos == 0) {
      std::fill(s.linear_state,
                s.linear_state + weights_.config.linear_state_floats(), 0.0f);
    }
  }
  Embed(batch);
  PrepareRope(batch);
  for (int64_t l = 0; l < weights_.config.num_layers; ++l) Layer(l, batch);
  LmHead(batch, logits.data());
  if (stats != nullptr) Account(batch, LogitRows(batch), stats);
  return absl::OkStatus();
}

void ForwardPass::Embed(absl::Span<const SequenceSpan> batch) {
  const int64_t hidden = weights_.config.hidden_size;
  const WeightView& emb = weights_.token_embedding;
  const int64_t rows = span_first_row_[batch.size()];
  pool_.ParallelFor(rows, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int32_t token = batch[row_span_[r]].tokens[row_in_span_[r]];
      DequantizeRow(emb.type, emb.row(token), x_.data() + r * hidden, hidden);
    }
  });
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceSpan& s = batch[i];
    if (s.image_embeds == nullptr) continue;
    // Validated: the placeholder count equals image_rows.
    InjectImageEmbeddings(s.tokens, weights_.config.vision.image_token_id,
                          s.image_embeds, s.image_rows, hidden,
                          x_.data() + span_first_row_[i] * hidden)
        .IgnoreError();
  }
}

void ForwardPass::PrepareRope(absl::Span<const SequenceSpan> batch) {
  const int64_t half = weights_.config.rope_dims / 2;
  const int64_t rows = span_first_row_[batch.size()];
  for (int64_t r = 0; r < rows; ++r) {
    const SequenceSpan& s = batch[row_span_[r]];
    const int64_t p = s.start_pos + row_in_span_[r] + s.rope_delta;
    if (!weights_.config.mrope_sections.empty()) {
      const int64_t text[3] = {p, p, p};
      const int64_t* thw = s.mrope_positions.empty()
                               ? text
                               : s.mrope_positions.data() + 3 * row_in_span_[r];
      MropeCosSin(thw, weights_.config.mrope_sections, inv_freq_.data(), half,
                  rope_cos_.data() + r * half, rope_sin_.data() + r * half);
      continue;
    }
    const float pos = static_cast<float>(p);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq_[i];
      rope_cos_[r * half + i] = std::cos(angle);
      rope_sin_[r * half + i] = std::sin(angle);
    }
  }
}

void ForwardPass::RmsNormRows(const float* x, const float* w, int64_t rows,
                              float* out) {
  const int64_t hidden = weights_.config.hidden_size;
  const float eps = weights_.config.rms_norm_eps;
  pool_.ParallelFor(rows, 32, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      RmsNorm(x + r * hidden, w, eps, hidden, out + r * hidden);
    }
  });
}

void ForwardPass::Layer(int64_t layer, absl::Span<const SequenceSpan> batch) {
  const ModelConfig& c = weights_.config;
  const LayerWeights& lw = weights_.layers[layer];
  const int64_t rows = span_first_row_[batch.size()];
  const int64_t hidden = c.hidden_size;

  RmsNormRows(x_.data(), lw.attn_norm, rows, xn_.data());
  if (c.IsLinearLayer(layer)) {
    gdn_->Run(linear_index_[layer], lw, xn_.data(), rows, batch,
              span_first_row_.data(), proj_.data(), pool_);
  } else {
    AttentionLayer(layer, lw, batch);
  }
  pool_.ParallelFor(rows, 64, [&](int64_t b, int64_t e) {
    AddInPlace(x_.data() + b * hidden, proj_.data() + b * hidden,
               (e - b) * hidden);
  });

  RmsNormRows(x_.data(), lw.ffn_norm, rows, xn_.data());
  if (c.IsMoeLayer(layer)) {
    moe_->Run(lw, xn_.data(), rows, proj_.data(), pool_);
  } else {
    DenseFfn(lw, rows);
  }
  pool_.ParallelFor(rows, 64, [&](int64_t b, int64_t e) {
    AddInPlace(x_.data() + b * hidden, proj_.data() + b * hidden,
               (e - b) * hidden);
  });
}

void ForwardPass::AttentionLayer(int64_t layer, const LayerWeights& lw,
                                 absl::Span<const SequenceSpan> batch) {
  const ModelConfig& c = weights_.config;
  const int64_t rows = rows_;
  const int64_t hidden = c.hidden_size;
  const int64_t qd = c.q_dim(), hd = c.head_dim;
  // Q, K and V of one input in one parallel region (activations prepared
  // once). With an output gate, q_proj's rows are per head
  // [q (hd) | gate (hd)] and are split below.
  const MatMulGroup qkv[] = {
      c.attn_output_gate
          ? MatMulGroup{lw.wq, xn_.data(), hidden, rows, qg_.data(), 2 * qd}
          : MatMulGroup{lw.wq, xn_.data(), hidden, rows, q_.data(), qd},
      {lw.wk, xn_.data(), hidden, rows, k_.data(), c.kv_dim()},
      {lw.wv, xn_.data(), hidden, rows, v_.data(), c.kv_dim()}};
  MatMulGrouped(qkv, pool_);
  if (c.attn_output_gate) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t h = 0; h < c.num_heads; ++h) {
        const float* src = qg_.data() + r * 2 * qd + 2 * h * hd;
        std::memcpy(q_.data() + r * qd + h * hd, src, hd * sizeof(float));
        std::memcpy(attn_gate_.data() + r * qd + h * hd, src + hd,
                    hd * sizeof(float));
      }
    }
  }
  // KV storage layer: full-attention layers are numbered without the linear
  // ones (hybrid models); identical to `layer` for dense models.
  const int64_t kv_layer = layer - (gdn_ ? linear_before_[layer] : 0);
  QkNormRopeAndStore(lw, kv_layer, batch);
  Attention(kv_layer, batch);
  if (c.attn_output_gate) {
    pool_.ParallelFor(rows * qd, 1024, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        attn_[i] *= 1.0f / (1.0f + std::exp(-attn_gate_[i]));
      }
    });
  }
  MatMul(lw.wo, attn_.data(), qd, rows, proj_.data(), hidden, pool_);
}

void ForwardPass::DenseFfn(const LayerWeights& lw, int64_t rows) {
  const int64_t hidden = weights_.config.hidden_size;
  const int64_t inter = weights_.config.intermediate_size;
  const MatMulGroup gate_up[] = {
      {lw.w_gate, xn_.data(), hidden, rows, gate_.data(), inter},
      {lw.w_up, xn_.data(), hidden, rows, up_.data(), inter}};
  MatMulGrouped(gate_up, pool_);
  pool_.ParallelFor(rows, 8, [&](int64_t b, int64_t e) {
    SwiGlu(gate_.data() + b * inter, up_.data() + b * inter, (e - b) * inter,
           gate_.data() + b * inter);
  });
  MatMul(lw.w_down, gate_.data(), inter, rows, proj_.data(), hidden, pool_);
}

void ForwardPass::QkNormRopeAndStore(const LayerWeights& lw, int64_t layer,
                                     absl::Span<const SequenceSpan> batch) {
  const ModelConfig& c = weights_.config;
  const int64_t hd = c.head_dim;
  const int64_t half = c.rope_dims / 2;
  const int64_t n = rows_;
  const int64_t ps = kv_.page_size();
  pool_.ParallelFor(n, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* q = q_.data() + r * c.q_dim();
      float* k = k_.data() + r * c.kv_dim();
      if (c.qk_norm) {
        for (int64_t h = 0; h < c.num_heads; ++h) {
          RmsNorm(q + h * hd, lw.q_norm, c.rms_norm_eps, hd, q + h * hd);
        }
        for (int64_t h = 0; h < c.num_kv_heads; ++h) {
          RmsNorm(k + h * hd, lw.k_norm, c.rms_norm_eps, hd, k + h * hd);
        }
      }
      const float* cs = rope_cos_.data() + r * half;
      const float* sn = rope_sin_.data() + r * half;
      RotateHeads(q, c.num_heads, hd, half, cs, sn, c.rope_style);
      RotateHeads(k, c.num_kv_heads, hd, half, cs, sn, c.rope_style);
      // The fused KV store: this row's key and value, in the cache's dtype.
      const SequenceSpan& s = batch[row_span_[r]];
      const int64_t pos = s.start_pos + row_in_span_[r];
      kv_.Write(s.page_table[pos / ps], layer, pos % ps, k,
                v_.data() + r * c.kv_dim());
    }
  });
}

void ForwardPass::PlanAttention(absl::Span<const SequenceSpan> batch) {
  const int64_t kv_heads = weights_.config.num_kv_heads;
  const int64_t q_per_row = weights_.config.num_heads;
  const int64_t rec_n = AttnPartialFloats(weights_.config.head_dim);
  num_items_ = 0;
  num_splits_ = 0;
  // Decode-sized spans read each key block for several kv heads at once
  // (bf16: one stream per page instead of one per head), as long as there
  // are about two items per thread; longer spans have rows enough.
  int64_t units = 0;  // items of the short spans with one item per span
  for (const SequenceSpan& sp : batch) {
    if (sp.size() <= kAttnRowChunk) {
      units += split_ok_ ? AttnSegments(sp.start_pos + sp.size()) : 1;
    }
  }
  int64_t per_item = 1;
  if (split_ok_ && kv_.dtype() == KvDType::kBF16 && units > 0) {
    const int64_t pieces = std::clamp<int64_t>(
        (2 * pool_.num_threads() + units - 1) / units, 1, kv_heads);
    per_item = (kv_heads + pieces - 1) / pieces;
  }
  int64_t split_rows = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t size = batch[i].size();
    const int64_t segs = AttnSegments(batch[i].start_pos + size);
    const int64_t step = size <= kAttnRowChunk ? per_item : 1;
    const auto span = static_cast<int32_t>(i);
    if (split_ok_ && size <= kAttnRowChunk && segs > 1 &&
        split_rows + size <= kMaxSplitRows) {
      // Partial records per (kv head, segment) at `offset`; items cover
      // `step` heads, whose records follow one another.
      auto offset = [&](int64_t h) {
        return (split_rows * q_per_row + h * size * (q_per_row / kv_heads)) *
               max_segments_ * rec_n;
      };
      for (int64_t h = 0; h < kv_heads; ++h) {
        splits_[num_splits_++] = {span, static_cast<int32_t>(h), offset(h)};
      }
      for (int64_t h = 0; h < kv_heads; h += step) {
        const auto n = static_cast<int32_t>(std::min(step, kv_heads - h));
        for (int64_t sg = 0; sg < segs; ++sg) {
          items_[num_items_++] = {span, static_cast<int32_t>(h), n, 0,
                                  static_cast<int32_t>(size),
                                  static_cast<int32_t>(sg), offset(h)};
        }
      }
      split_rows += size;
      continue;
    }
    for (int64_t b = 0; b < size; b += kAttnRowChunk) {
      const int64_t e = std::min(size, b + kAttnRowChunk);
      for (int64_t h = 0; h < kv_heads; h += step) {
        const auto n = static_cast<int32_t>(std::min(step, kv_heads - h));
        items_[num_items_++] = {span, static_cast<int32_t>(h), n,
                                static_cast<int32_t>(b),
                                static_cast<int32_t>(e), -1, -1};
      }
    }
  }
}

AttentionBlock ForwardPass::BlockFor(int64_t layer, const SequenceSpan& span,
                                     int64_t span_index, int32_t kv_head,
                                     int32_t kv_heads, int32_t row_begin,
                                     int32_t row_end) {
  const ModelConfig& c = weights_.config;
  const int64_t first = span_first_row_[span_index];
  AttentionBlock block;
  block.kv = &kv_;
  block.layer = layer;
  block.page_table = span.page_table;
  block.start_pos = span.start_pos;
  block.row_begin = row_begin;
  block.row_end = row_end;
  block.kv_head = kv_head;
  block.kv_heads = kv_heads;
  block.group = c.num_heads / c.num_kv_heads;
  block.head_dim = c.head_dim;
  block.q = q_.data() + first * c.q_dim();
  block.q_stride = c.q_dim();
  block.out = attn_.data() + first * c.q_dim();
  return block;
}

void ForwardPass::Attention(int64_t layer,
                            absl::Span<const SequenceSpan> batch) {
  PlanAttention(batch);
  next_item_.store(0, std::memory_order_relaxed);
  // Dynamic scheduling: each thread takes the next item and uses its own
  // scratch. Every query row is computed by the same code in the same
  // order whichever thread takes it, and a split query's segments are
  // merged in order afterwards, so results do not depend on the split.
  pool_.RunOnAll([&](int thread) {
    float* scratch = scratch_.data() + thread * scratch_per_thread_;
    for (;;) {
      const int64_t it = next_item_.fetch_add(1, std::memory_order_relaxed);
      if (it >= num_items_) break;
      const AttnItem& item = items_[it];
      const AttentionBlock block =
          BlockFor(layer, batch[item.span], item.span, item.kv_head,
                   item.kv_heads, item.row_begin, item.row_end);
      if (item.segment < 0) {
        AttendBlock(block, scratch);
      } else {
        AttendTiledPartial(block, item.segment, item.segment + 1,
                           partials_.data() + item.partial_offset,
                           max_segments_, scratch);
      }
    }
  });
  for (int64_t i = 0; i < num_splits_; ++i) {
    const SplitSpan& sp = splits_[i];
    const SequenceSpan& span = batch[sp.span];
    const AttentionBlock block =
        BlockFor(layer, span, sp.span, sp.kv_head, 1, 0,
                 static_cast<int32_t>(span.size()));
    CombineAttnPartials(block, partials_.data() + sp.partial_offset,
                        max_segments_);
  }
}

void ForwardPass::LmHead(absl::Span<const SequenceSpan> batch,
                         float* logits) {
  const ModelConfig& c = weights_.config;
  const int64_t hidden = c.hidden_size;
  // Gather the wanted rows (normed) into xn_, compacted, then one MatMul.
  int64_t out_rows = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t first = span_first_row_[i];
    const int64_t begin =
        batch[i].all_logits ? first : first + batch[i].size() - 1;
    const int64_t end = first + batch[i].size();
    for (int64_t r = begin; r < end; ++r, ++out_rows) {
      logit_src_[out_rows] = static_cast<int32_t>(r);
    }
  }
  pool_.ParallelFor(out_rows, 32, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      RmsNorm(x_.data() + logit_src_[o] * hidden, weights_.output_norm,
              c.rms_norm_eps, hidden, xn_.data() + o * hidden);
    }
  });
  MatMul(weights_.lm_head, xn_.data(), hidden, out_rows, logits, c.vocab_size,
         pool_);
}

void ForwardPass::Account(absl::Span<const SequenceSpan> batch,
                          int64_t logit_rows, ForwardStats* stats) const {
  const ModelConfig& c = weights_.config;
  ForwardStats s;
  s.steps = 1;
  s.tokens = rows_;
  s.logit_rows = logit_rows;
  s.weight_bytes_read = layer_bytes_ +
                        rows_ * weights_.token_embedding.row_bytes +
                        (logit_rows > 0 ? lm_head_bytes_ : 0);
  // Only full-attention layers read and write KV (hybrid models).
  const int64_t attn_layers = c.num_layers - c.num_linear_layers();
  const int64_t kv_token_bytes = attn_layers * kv_.bytes_per_token_per_layer();
  int64_t attn_macs = 0;
  for (const SequenceSpan& span : batch) {
    s.kv_bytes_read += (span.start_pos + span.size()) * kv_token_bytes;
    s.kv_bytes_written += span.size() * kv_token_bytes;
    // Row i attends over start_pos + i + 1 keys: QK^T and PV per head.
    const int64_t keys = span.size() * span.start_pos +
                         span.size() * (span.size() + 1) / 2;
    attn_macs += 2 * keys * c.head_dim * c.num_heads;
  }
  s.flops = 2 * (rows_ * layer_macs_ + attn_layers * attn_macs +
                 logit_rows * MatrixMacs(weights_.lm_head));
  if (moe_) {
    const MoeCounters& m = moe_->counters();
    s.experts_selected = m.experts_selected;
    s.expert_matrices_read = m.expert_matrices_read;
    s.weight_bytes_read += m.expert_bytes_read;
    s.flops += 2 * m.expert_macs;
  }
  *stats += s;
}

}  // namespace pdserve
