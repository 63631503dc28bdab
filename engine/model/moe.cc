#include "engine/model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace pdserve {

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
  if (shared_inter_ > 0) {
    sh_gate_.resize(n * shared_inter_);
    sh_up_.resize(n * shared_inter_);
    sh_out_.resize(n * hidden_);
    sh_g_.resize(n);
  }
}

void MoeBlock::Shared(const LayerWeights& lw, const float* xn, int64_t rows,
                      float* out, ThreadPool& pool) {
  const int64_t f = shared_inter_;
  MatMul(lw.shared.gate, xn, hidden_, rows, sh_gate_.data(), f, pool);
  MatMul(lw.shared.up, xn, hidden_, rows, sh_up_.data(), f, pool);
  SwiGlu(sh_gate_.data(), sh_up_.data(), rows * f, sh_gate_.data());
  MatMul(lw.shared.down, sh_gate_.data(), f, rows, sh_out_.data(), hidden_,
         pool);
  MatMul(lw.shared_gate, xn, hidden_, rows, sh_g_.data(), 1, pool);
  for (int64_t r = 0; r < rows; ++r) {
    const float g = 1.0f / (1.0f + std::exp(-sh_g_[r]));
    float* y = out + r * hidden_;
    const float* s = sh_out_.data() + r * hidden_;
    for (int64_t i = 0; i < hidden_; ++i) y[i] += g * s[i];
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

void MoeBlock::Run(const LayerWeights& lw, const float* xn, int64_t rows,
                   float* out, ThreadPool& pool) {
  Route(lw, xn, rows, pool);
  Group(rows);
  const int64_t total = rows * top_k_;
  pool.ParallelFor(total, 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      std::memcpy(xg_.data() + i * hidden_, xn + gather_row_[i] * hidden_,
                  hidden_ * sizeof(float));
    }
  });
  for (int64_t x = 0; x < experts_; ++x) {
    const int64_t n = offset_[x + 1] - offset_[x];
    if (n == 0) continue;
    const ExpertWeights& ew = lw.experts[x];
    const int64_t o = offset_[x];
    MatMul(ew.gate, xg_.data() + o * hidden_, hidden_, n,
           gate_.data() + o * inter_, inter_, pool);
    MatMul(ew.up, xg_.data() + o * hidden_, hidden_, n, up_.data() + o * inter_,
           inter_, pool);
    SwiGlu(gate_.data() + o * inter_, up_.data() + o * inter_, n * inter_,
           gate_.data() + o * inter_);
    MatMul(ew.down, gate_.data() + o * inter_, inter_, n,
           yg_.data() + o * hidden_, hidden_, pool);
    counters_.expert_matrices_read += 3;
    for (const WeightView* w : {&ew.gate, &ew.up, &ew.down}) {
      counters_.expert_bytes_read += w->rows * w->row_bytes;
      counters_.expert_macs += n * w->rows * w->cols;
    }
  }
  pool.ParallelFor(rows, 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* y = out + r * hidden_;
      std::fill(y, y + hidden_, 0.0f);
      for (int64_t j = 0; j < top_k_; ++j) {
        const float w = weight_[r * top_k_ + j];
        const float* src = yg_.data() + slot_[r * top_k_ + j] * hidden_;
        for (int64_t i = 0; i < hidden_; ++i) y[i] += src[i] * w;
      }
    }
  });
  if (shared_inter_ > 0 && !lw.shared_gate.empty()) {
    Shared(lw, xn, rows, out, pool);
  }
}

}  // namespace pdserve
