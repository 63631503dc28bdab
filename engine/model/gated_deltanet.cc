#include "engine/model/gated_deltanet.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "engine/model/forward.h"
#include "kernels/matmul.h"
#include "kernels/matmul_grouped.h"
#include "kernels/ops.h"

namespace pdserve {
namespace {

constexpr int64_t kMaxConvKernel = 16;

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float Silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus (beta 1, threshold 20).
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// x *= rsqrt(sum(x^2) + 1e-6), as transformers' l2norm.
void L2Norm(float* x, int64_t n) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace

GatedDeltaNet::GatedDeltaNet(const ModelConfig& c, int64_t max_rows,
                             int num_threads)
    : c_(c), max_rows_(max_rows) {
  const auto n = static_cast<size_t>(max_rows);
  qkv_.resize(n * c.linear_conv_dim());
  conv_.resize(n * c.linear_conv_dim());
  z_.resize(n * c.linear_value_dim());
  b_.resize(n * c.linear_num_v_heads);
  a_.resize(n * c.linear_num_v_heads);
  core_.resize(n * c.linear_value_dim());
  const int64_t kd = c.linear_k_head_dim, vd = c.linear_v_head_dim;
  scratch_per_thread_ = kChunk * (1 + kChunk + kChunk + 3 * vd + kd) + vd;
  scratch_.resize(static_cast<size_t>(num_threads) * scratch_per_thread_);
}

void GatedDeltaNet::Conv(int64_t linear_index, const LayerWeights& lw,
                         absl::Span<const SequenceSpan> batch,
                         const int64_t* first_row, ThreadPool& pool) {
  const int64_t dim = c_.linear_conv_dim();
  const int64_t kw = c_.linear_conv_kernel;
  const int64_t keep = kw - 1;
  const int64_t per_layer =
      c_.conv_state_floats() + c_.recurrent_state_floats();
  const int64_t items = static_cast<int64_t>(batch.size()) * dim;
  pool.ParallelFor(items, 64, [&](int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) {
      const int64_t s = it / dim, ch = it % dim;
      const SequenceSpan& span = batch[s];
      float* st = span.linear_state + linear_index * per_layer + ch * keep;
      const float* w = lw.lin_conv + ch * kw;
      const int64_t n = span.size();
      const int64_t r0 = first_row[s];
      // x_ext[i]: the state for i < keep, else new token i - keep.
      auto ext = [&](int64_t i) {
        return i < keep ? st[i] : qkv_[(r0 + i - keep) * dim + ch];
      };
      for (int64_t t = 0; t < n; ++t) {
        float acc = 0.0f;
        for (int64_t j = 0; j < kw; ++j) acc += w[j] * ext(t + j);
        conv_[(r0 + t) * dim + ch] = Silu(acc);
      }
      float tail[kMaxConvKernel];
      for (int64_t j = 0; j < keep; ++j) tail[j] = ext(n + j);
      std::memcpy(st, tail, keep * sizeof(float));
    }
  });
}

void GatedDeltaNet::PrepareHeads(const LayerWeights& lw, int64_t rows,
                                 ThreadPool& pool) {
  const int64_t dim = c_.linear_conv_dim();
  const int64_t kd = c_.linear_k_head_dim, nk = c_.linear_num_k_heads;
  const int64_t nv = c_.linear_num_v_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kd));
  pool.ParallelFor(rows, 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* q = conv_.data() + r * dim;
      float* k = q + nk * kd;
      for (int64_t h = 0; h < nk; ++h) {
        L2Norm(q + h * kd, kd);
        L2Norm(k + h * kd, kd);
        for (int64_t i = 0; i < kd; ++i) q[h * kd + i] *= scale;
      }
      for (int64_t h = 0; h < nv; ++h) {
        b_[r * nv + h] = Sigmoid(b_[r * nv + h]);
        a_[r * nv + h] = -std::exp(lw.lin_a_log[h]) *
                         Softplus(a_[r * nv + h] + lw.lin_dt_bias[h]);
      }
    }
  });
}

void GatedDeltaNet::Recurrent(float* S, int64_t r, int64_t h) {
  const int64_t dim = c_.linear_conv_dim();
  const int64_t kd = c_.linear_k_head_dim, vd = c_.linear_v_head_dim;
  const int64_t nv = c_.linear_num_v_heads;
  const int64_t kh = h / (nv / c_.linear_num_k_heads);
  const float* q = conv_.data() + r * dim + kh * kd;
  const float* k = conv_.data() + r * dim + c_.linear_key_dim() + kh * kd;
  const float* v = conv_.data() + r * dim + 2 * c_.linear_key_dim() + h * vd;
  const float decay = std::exp(a_[r * nv + h]);
  const float beta = b_[r * nv + h];
  float* o = core_.data() + r * c_.linear_value_dim() + h * vd;
  for (int64_t i = 0; i < kd * vd; ++i) S[i] *= decay;
  // o temporarily holds delta = beta * (v - S^T k).
  for (int64_t j = 0; j < vd; ++j) o[j] = 0.0f;
  for (int64_t i = 0; i < kd; ++i) Axpy(k[i], S + i * vd, o, vd);
  for (int64_t j = 0; j < vd; ++j) o[j] = (v[j] - o[j]) * beta;
  for (int64_t i = 0; i < kd; ++i) Axpy(k[i], o, S + i * vd, vd);
  for (int64_t j = 0; j < vd; ++j) o[j] = 0.0f;
  for (int64_t i = 0; i < kd; ++i) Axpy(q[i], S + i * vd, o, vd);
}

void GatedDeltaNet::Chunked(float* S, int64_t row0, int64_t n, int64_t h,
                            float* scratch) {
  const int64_t dim = c_.linear_conv_dim();
  const int64_t kd = c_.linear_k_head_dim, vd = c_.linear_v_head_dim;
  const int64_t nv = c_.linear_num_v_heads;
  const int64_t kh = h / (nv / c_.linear_num_k_heads);
  const int64_t koff = c_.linear_key_dim() + kh * kd;
  const int64_t voff = 2 * c_.linear_key_dim() + h * vd;
  float* gc = scratch;              // [kChunk]
  float* T = gc + kChunk;           // [kChunk][kChunk] strict lower
  float* QK = T + kChunk * kChunk;  // [kChunk][kChunk] q_i . k_j decayed
  float* U = QK + kChunk * kChunk;  // [kChunk][vd]
  float* W = U + kChunk * vd;       // [kChunk][kd]
  float* VN = W + kChunk * kd;      // [kChunk][vd] v_new
  float* O = VN + kChunk * vd;      // [kChunk][vd]
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t L = std::min(kChunk, n - c0);
    auto q = [&](int64_t i) {
      return conv_.data() + (row0 + c0 + i) * dim + kh * kd;
    };
    auto k = [&](int64_t i) {
      return conv_.data() + (row0 + c0 + i) * dim + koff;
    };
    auto v = [&](int64_t i) {
      return conv_.data() + (row0 + c0 + i) * dim + voff;
    };
    auto beta = [&](int64_t i) { return b_[(row0 + c0 + i) * nv + h]; };
    float acc = 0.0f;
    for (int64_t i = 0; i < L; ++i) {
      acc += a_[(row0 + c0 + i) * nv + h];
      gc[i] = acc;
    }
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t j = 0; j <= i; ++j) {
        const float d = std::exp(gc[i] - gc[j]);
        T[i * kChunk + j] = beta(i) * Dot(k(i), k(j), kd) * d;
        QK[i * kChunk + j] = Dot(q(i), k(j), kd) * d;
      }
    }
    // (I + T) U = beta v, (I + T) W = beta exp(gc) k: forward substitution.
    for (int64_t i = 0; i < L; ++i) {
      float* u = U + i * vd;
      float* w = W + i * kd;
      for (int64_t x = 0; x < vd; ++x) u[x] = beta(i) * v(i)[x];
      const float bd = beta(i) * std::exp(gc[i]);
      for (int64_t x = 0; x < kd; ++x) w[x] = bd * k(i)[x];
      for (int64_t j = 0; j < i; ++j) {
        Axpy(-T[i * kChunk + j], U + j * vd, u, vd);
        Axpy(-T[i * kChunk + j], W + j * kd, w, kd);
      }
    }
    for (int64_t i = 0; i < L; ++i) {
      float* vn = VN + i * vd;
      float* o = O + i * vd;
      std::memcpy(vn, U + i * vd, vd * sizeof(float));
      for (int64_t x = 0; x < vd; ++x) o[x] = 0.0f;
      const float eg = std::exp(gc[i]);
      for (int64_t y = 0; y < kd; ++y) {
        Axpy(-W[i * kd + y], S + y * vd, vn, vd);
        Axpy(q(i)[y] * eg, S + y * vd, o, vd);
      }
      for (int64_t j = 0; j <= i; ++j)
        Axpy(QK[i * kChunk + j], VN + j * vd, o, vd);
      std::memcpy(
          core_.data() + (row0 + c0 + i) * c_.linear_value_dim() + h * vd, o,
          vd * sizeof(float));
    }
    const float last = gc[L - 1];
    const float el = std::exp(last);
    for (int64_t x = 0; x < kd * vd; ++x) S[x] *= el;
    for (int64_t j = 0; j < L; ++j) {
      const float d = std::exp(last - gc[j]);
      for (int64_t y = 0; y < kd; ++y)
        Axpy(k(j)[y] * d, VN + j * vd, S + y * vd, vd);
    }
  }
}

void GatedDeltaNet::Run(int64_t linear_index, const LayerWeights& lw,
                        const float* xn, int64_t rows,
                        absl::Span<const SequenceSpan> batch,
                        const int64_t* first_row, float* out,
                        ThreadPool& pool) {
  const int64_t hidden = c_.hidden_size;
  const int64_t nv = c_.linear_num_v_heads, vd = c_.linear_v_head_dim;
  const int64_t vdim = c_.linear_value_dim();
  // The four in-projections of one input in one parallel region.
  const MatMulGroup in_proj[] = {
      {lw.lin_qkv, xn, hidden, rows, qkv_.data(), c_.linear_conv_dim()},
      {lw.lin_z, xn, hidden, rows, z_.data(), vdim},
      {lw.lin_b, xn, hidden, rows, b_.data(), nv},
      {lw.lin_a, xn, hidden, rows, a_.data(), nv}};
  MatMulGrouped(in_proj, pool);
  Conv(linear_index, lw, batch, first_row, pool);
  PrepareHeads(lw, rows, pool);
  const int64_t per_layer =
      c_.conv_state_floats() + c_.recurrent_state_floats();
  const int64_t items = static_cast<int64_t>(batch.size()) * nv;
  std::atomic<int64_t> next{0};
  pool.RunOnAll([&](int thread) {
    float* scratch = scratch_.data() + thread * scratch_per_thread_;
    for (;;) {
      const int64_t it = next.fetch_add(1, std::memory_order_relaxed);
      if (it >= items) break;
      const int64_t s = it / nv, h = it % nv;
      const SequenceSpan& span = batch[s];
      float* S = span.linear_state + linear_index * per_layer +
                 c_.conv_state_floats() + h * c_.linear_k_head_dim * vd;
      if (span.size() == 1) {
        Recurrent(S, first_row[s], h);
      } else {
        Chunked(S, first_row[s], span.size(), h, scratch);
      }
    }
  });
  // Gated RMSNorm per value head, then the output projection.
  pool.ParallelFor(rows, 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      for (int64_t h = 0; h < nv; ++h) {
        float* o = core_.data() + r * vdim + h * vd;
        const float* z = z_.data() + r * vdim + h * vd;
        RmsNorm(o, lw.lin_norm, c_.rms_norm_eps, vd, o);
        for (int64_t x = 0; x < vd; ++x) o[x] *= Silu(z[x]);
      }
    }
  });
  MatMul(lw.lin_out, core_.data(), vdim, rows, out, hidden, pool);
}

}  // namespace pdserve
