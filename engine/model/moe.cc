#include "engine/model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/matmul.h"
#include "kernels/matmul_grouped.h"
#include "kernels/ops.h"

namespace pdserve {
namespace {

// out = silu(gate) * up (out == gate) over n rows of `width` values, split
// over the pool (SwiGlu's arithmetic does not depend on where a value sits).
void SwiGluRows(float* gate, const float* up, int64_t n, int64_t width,
                ThreadPool& pool) {
  const int64_t grain = std::max<int64_t>(1, (16 << 10) / width);
  pool.ParallelFor(n, grain, [&](int64_t b, int64_t e) {
    SwiGlu(gate + b * width, up + b * width, (e - b) * width, gate + b * width);
  });
}

}  // namespace

MoeBlock::MoeBlock(const ModelConfig& c, int64_t max_rows)
    : hidden_(c.hidden_size),
      experts_(c.num_experts),
      top_k_(c.num_experts_used),
      inter_(c.moe_intermediate_size),
      norm_topk_(c.norm_topk_prob),
      max_rows_(max_rows),
      shared_inter_(c.shared_expert_intermediate_size) {
  const auto n = static_cast<size_t>(max_rows_);
  const auto nk = n * static_cast<size_t>(top_k_);
  logits_.resize(n * experts_);
  sel_.resize(nk);
  weight_.resize(nk);
  slot_.resize(nk);
  count_.resize(experts_);
  offset_.resize(experts_ + 1);
  gather_row_.resize(nk);
  xg_.resize(nk * hidden_);
  gate_.resize(nk * inter_);
  up_.resize(nk * inter_);
  yg_.resize(nk * hidden_);
  groups_.resize(2 * experts_ + 3);
  if (shared_inter_ > 0) {
    sh_gate_.resize(n * shared_inter_);
    sh_up_.resize(n * shared_inter_);
    sh_out_.resize(n * hidden_);
    sh_g_.resize(n);
  }
}

void MoeBlock::Route(const LayerWeights& lw, const float* xn, int64_t rows,
                     ThreadPool& pool) {
  MatMul(lw.router, xn, hidden_, rows, logits_.data(), experts_, pool);
  pool.ParallelFor(rows, 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* p = logits_.data() + r * experts_;
      Softmax(p, experts_);
      int32_t* sel = sel_.data() + r * top_k_;
      // Top-k by probability, lower id first on ties (selection sort: k is
      // small).
      for (int64_t j = 0; j < top_k_; ++j) {
        int32_t best = -1;
        for (int64_t x = 0; x < experts_; ++x) {
          bool taken = false;
          for (int64_t i = 0; i < j; ++i) taken |= sel[i] == x;
          if (!taken && (best < 0 || p[x] > p[best])) {
            best = static_cast<int32_t>(x);
          }
        }
        sel[j] = best;
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < top_k_; ++j) sum += p[sel[j]];
      // Ascending expert id: the order transformers accumulates in.
      std::sort(sel, sel + top_k_);
      float* w = weight_.data() + r * top_k_;
      for (int64_t j = 0; j < top_k_; ++j) {
        w[j] = norm_topk_ ? p[sel[j]] / sum : p[sel[j]];
      }
    }
  });
}

void MoeBlock::Group(int64_t rows) {
  std::fill(count_.begin(), count_.end(), 0);
  for (int64_t i = 0; i < rows * top_k_; ++i) ++count_[sel_[i]];
  offset_[0] = 0;
  for (int64_t x = 0; x < experts_; ++x) {
    offset_[x + 1] = offset_[x] + count_[x];
    counters_.experts_selected += count_[x] > 0 ? 1 : 0;
  }
  std::fill(count_.begin(), count_.end(), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < top_k_; ++j) {
      const int32_t x = sel_[r * top_k_ + j];
      const int64_t pos = offset_[x] + count_[x]++;
      gather_row_[pos] = static_cast<int32_t>(r);
      slot_[r * top_k_ + j] = static_cast<int32_t>(pos);
    }
  }
}

void MoeBlock::Gather(const float* xn, int64_t rows, ThreadPool& pool) {
  // A copy of a few rows is not worth waking threads for.
  const int64_t grain = std::max<int64_t>(16, (64 << 10) / hidden_);
  pool.ParallelFor(rows * top_k_, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      std::memcpy(xg_.data() + i * hidden_, xn + gather_row_[i] * hidden_,
                  hidden_ * sizeof(float));
    }
  });
}

void MoeBlock::Experts(const LayerWeights& lw, const float* xn, int64_t rows,
                       bool shared, ThreadPool& pool) {
  // Gate and up of every selected expert (adjacent: they share the prepared
  // input), then the shared expert's gate, up and gate logit.
  size_t n_groups = 0;
  for (int64_t x = 0; x < experts_; ++x) {
    const int64_t n = offset_[x + 1] - offset_[x];
    if (n == 0) continue;
    const ExpertWeights& ew = lw.experts[x];
    const float* xg = xg_.data() + offset_[x] * hidden_;
    groups_[n_groups++] = {
        ew.gate, xg, hidden_, n, gate_.data() + offset_[x] * inter_, inter_};
    groups_[n_groups++] = {
        ew.up, xg, hidden_, n, up_.data() + offset_[x] * inter_, inter_};
    counters_.expert_matrices_read += 3;
    for (const WeightView* w : {&ew.gate, &ew.up, &ew.down}) {
      counters_.expert_bytes_read += w->rows * w->row_bytes;
      counters_.expert_macs += n * w->rows * w->cols;
    }
  }
  const int64_t f = shared_inter_;
  if (shared) {
    groups_[n_groups++] = {lw.shared.gate,  xn, hidden_, rows,
                           sh_gate_.data(), f};
    groups_[n_groups++] = {lw.shared.up, xn, hidden_, rows, sh_up_.data(), f};
    groups_[n_groups++] = {lw.shared_gate, xn, hidden_, rows, sh_g_.data(), 1};
  }
  MatMulGrouped(absl::MakeConstSpan(groups_.data(), n_groups), pool);

  const int64_t total = rows * top_k_;
  SwiGluRows(gate_.data(), up_.data(), total, inter_, pool);
  if (shared) SwiGluRows(sh_gate_.data(), sh_up_.data(), rows, f, pool);

  n_groups = 0;
  for (int64_t x = 0; x < experts_; ++x) {
    const int64_t n = offset_[x + 1] - offset_[x];
    if (n == 0) continue;
    groups_[n_groups++] = {lw.experts[x].down,
                           gate_.data() + offset_[x] * inter_,
                           inter_,
                           n,
                           yg_.data() + offset_[x] * hidden_,
                           hidden_};
  }
  if (shared) {
    groups_[n_groups++] = {lw.shared.down, sh_gate_.data(), f,
                           rows,           sh_out_.data(),  hidden_};
  }
  MatMulGrouped(absl::MakeConstSpan(groups_.data(), n_groups), pool);
}

void MoeBlock::Combine(int64_t rows, bool shared, float* out,
                       ThreadPool& pool) {
  pool.ParallelFor(rows, 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* y = out + r * hidden_;
      std::fill(y, y + hidden_, 0.0f);
      for (int64_t j = 0; j < top_k_; ++j) {
        const float w = weight_[r * top_k_ + j];
        const float* src = yg_.data() + slot_[r * top_k_ + j] * hidden_;
        for (int64_t i = 0; i < hidden_; ++i) y[i] += src[i] * w;
      }
      if (!shared) continue;
      // The shared expert after the routed sum (Qwen3NextSparseMoeBlock).
      const float g = 1.0f / (1.0f + std::exp(-sh_g_[r]));
      const float* s = sh_out_.data() + r * hidden_;
      for (int64_t i = 0; i < hidden_; ++i) y[i] += g * s[i];
    }
  });
}

void MoeBlock::Run(const LayerWeights& lw, const float* xn, int64_t rows,
                   float* out, ThreadPool& pool) {
  Route(lw, xn, rows, pool);
  Group(rows);
  Gather(xn, rows, pool);
  const bool shared = shared_inter_ > 0 && !lw.shared_gate.empty();
  Experts(lw, xn, rows, shared, pool);
  Combine(rows, shared, out, pool);
}

}  // namespace pdserve
