// Test helpers for engine/model: random in-memory models and a plain
// double-precision reference forward pass (no KV cache, no batching).
#ifndef PDSERVE_TESTS_ENGINE_MODEL_TEST_UTIL_H_
#define PDSERVE_TESTS_ENGINE_MODEL_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "engine/model_weights.h"
#include "kernels/dtype.h"
#include "kernels/ops.h"

namespace pdserve::testing_model {

struct TinyShape {
  Architecture arch = Architecture::kLlama;
  int64_t vocab = 40;
  int64_t hidden = 32;
  int64_t inter = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 8;
  RopeStyle rope = RopeStyle::kNeox;
  DType dtype = DType::kF32;  // matrices; quantized needs cols % 32 == 0
  bool tied = false;
  uint64_t seed = 1;
};

// A random model. Matrices are stored as `dtype` (quantized with QuantizeRow)
// and also kept dequantized in `f32` for the reference.
struct TinyModel {
  ModelWeights weights;
  // Dequantized copies for the reference, keyed like the WeightViews.
  struct Dense {
    std::vector<float> data;
    int64_t rows = 0, cols = 0;
    float at(int64_t r, int64_t c) const { return data[r * cols + c]; }
  };
  struct Layer {
    Dense wq, wk, wv, wo, gate, up, down;
    std::vector<float> attn_norm, ffn_norm, q_norm, k_norm;
  };
  Dense embedding, lm_head;
  std::vector<Layer> layers;
  std::vector<float> output_norm;
};

inline std::vector<float> RandomVector(std::mt19937_64& rng, int64_t n,
                                       float mean, float scale) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = mean + scale * dist(rng);
  return v;
}

inline std::unique_ptr<TinyModel> MakeTinyModel(const TinyShape& s) {
  auto m = std::make_unique<TinyModel>();
  std::mt19937_64 rng(s.seed);
  ModelConfig& c = m->weights.config;
  c.arch = s.arch;
  c.name = "tiny";
  c.vocab_size = s.vocab;
  c.hidden_size = s.hidden;
  c.intermediate_size = s.inter;
  c.num_layers = s.layers;
  c.num_heads = s.heads;
  c.num_kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.rope_dims = s.head_dim;
  c.rope_theta = 10000.0f;
  c.rope_style = s.rope;
  c.rms_norm_eps = 1e-5f;
  c.max_context = 512;
  c.tied_embeddings = s.tied;
  c.qk_norm = s.arch == Architecture::kQwen3;
  c.bos_token_id = 1;
  c.eos_token_id = 2;

  auto matrix = [&](int64_t rows, int64_t cols, float scale, DType type,
                    TinyModel::Dense* dense) {
    std::vector<float> f = RandomVector(rng, rows * cols, 0.0f, scale);
    const int64_t row_bytes = RowBytes(type, cols).value();
    auto raw = std::make_shared<std::vector<uint8_t>>(rows * row_bytes);
    dense->rows = rows;
    dense->cols = cols;
    dense->data.resize(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      QuantizeRow(type, f.data() + r * cols, raw->data() + r * row_bytes, cols);
      DequantizeRow(type, raw->data() + r * row_bytes,
                    dense->data.data() + r * cols, cols);
    }
    WeightView w{type, rows, cols, row_bytes, raw->data()};
    m->weights.storage.push_back(raw);
    return w;
  };
  auto vec = [&](int64_t n, std::vector<float>* keep) {
    *keep = RandomVector(rng, n, 1.0f, 0.2f);
    return keep->data();
  };
  const float in_scale = 1.5f / std::sqrt(static_cast<float>(s.hidden));
  m->weights.token_embedding =
      matrix(s.vocab, s.hidden, s.tied ? 0.4f : 1.0f, s.dtype, &m->embedding);
  m->layers.resize(s.layers);
  m->weights.layers.resize(s.layers);
  for (int64_t l = 0; l < s.layers; ++l) {
    TinyModel::Layer& d = m->layers[l];
    LayerWeights& w = m->weights.layers[l];
    const int64_t qd = s.heads * s.head_dim, kvd = s.kv_heads * s.head_dim;
    w.attn_norm = vec(s.hidden, &d.attn_norm);
    w.wq = matrix(qd, s.hidden, in_scale, s.dtype, &d.wq);
    w.wk = matrix(kvd, s.hidden, in_scale, s.dtype, &d.wk);
    w.wv = matrix(kvd, s.hidden, in_scale, s.dtype, &d.wv);
    w.wo = matrix(s.hidden, qd, 1.5f / std::sqrt(float(qd)), s.dtype, &d.wo);
    if (c.qk_norm) {
      w.q_norm = vec(s.head_dim, &d.q_norm);
      w.k_norm = vec(s.head_dim, &d.k_norm);
    }
    w.ffn_norm = vec(s.hidden, &d.ffn_norm);
    w.w_gate = matrix(s.inter, s.hidden, in_scale, s.dtype, &d.gate);
    w.w_up = matrix(s.inter, s.hidden, in_scale, s.dtype, &d.up);
    w.w_down =
        matrix(s.hidden, s.inter, 1.5f / std::sqrt(float(s.inter)), s.dtype,
               &d.down);
  }
  m->weights.output_norm = vec(s.hidden, &m->output_norm);
  if (s.tied) {
    m->weights.lm_head = m->weights.token_embedding;
    m->lm_head = m->embedding;
  } else {
    m->weights.lm_head = matrix(s.vocab, s.hidden, in_scale, s.dtype,
                                &m->lm_head);
  }
  m->weights.source_format = "test";
  return m;
}

// Reference: logits [tokens.size()][vocab] for a whole sequence from position
// 0 (+ rope_delta), in double except RoPE (kernels' ApplyRope, f32).
inline std::vector<float> ReferenceLogits(const TinyModel& m,
                                          const std::vector<int32_t>& tokens,
                                          int64_t rope_delta = 0) {
  const ModelConfig& c = m.weights.config;
  const int64_t n = tokens.size(), H = c.hidden_size, hd = c.head_dim;
  using Vec = std::vector<double>;
  auto rms = [&](const Vec& x, const std::vector<float>& w) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / x.size() + c.rms_norm_eps);
    Vec out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv * w[i];
    return out;
  };
  auto mv = [](const TinyModel::Dense& w, const Vec& x) {
    Vec y(w.rows, 0.0);
    for (int64_t r = 0; r < w.rows; ++r)
      for (int64_t i = 0; i < w.cols; ++i) y[r] += w.at(r, i) * x[i];
    return y;
  };
  std::vector<Vec> x(n, Vec(H));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < H; ++i) x[t][i] = m.embedding.at(tokens[t], i);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const TinyModel::Layer& L = m.layers[l];
    std::vector<Vec> q(n), k(n), v(n);
    for (int64_t t = 0; t < n; ++t) {
      Vec xn = rms(x[t], L.attn_norm);
      q[t] = mv(L.wq, xn);
      k[t] = mv(L.wk, xn);
      v[t] = mv(L.wv, xn);
      auto head_norm = [&](Vec& z, int64_t heads, const std::vector<float>& w) {
        for (int64_t h = 0; h < heads; ++h) {
          Vec part(z.begin() + h * hd, z.begin() + (h + 1) * hd);
          part = rms(part, w);
          std::copy(part.begin(), part.end(), z.begin() + h * hd);
        }
      };
      if (c.qk_norm) {
        head_norm(q[t], c.num_heads, L.q_norm);
        head_norm(k[t], c.num_kv_heads, L.k_norm);
      }
      std::vector<float> qf(q[t].begin(), q[t].end());
      std::vector<float> kf(k[t].begin(), k[t].end());
      ApplyRope(qf.data(), c.num_heads, hd, c.rope_dims, t + rope_delta,
                c.rope_theta, c.rope_style);
      ApplyRope(kf.data(), c.num_kv_heads, hd, c.rope_dims, t + rope_delta,
                c.rope_theta, c.rope_style);
      q[t].assign(qf.begin(), qf.end());
      k[t].assign(kf.begin(), kf.end());
    }
    const int64_t group = c.num_heads / c.num_kv_heads;
    for (int64_t t = 0; t < n; ++t) {
      Vec att(c.q_dim(), 0.0);
      for (int64_t h = 0; h < c.num_heads; ++h) {
        const int64_t kh = h / group;
        Vec s(t + 1);
        double mx = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += q[t][h * hd + i] * k[j][kh * hd + i];
          s[j] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t i = 0; i < hd; ++i)
            att[h * hd + i] += s[j] / sum * v[j][kh * hd + i];
      }
      Vec o = mv(L.wo, att);
      for (int64_t i = 0; i < H; ++i) x[t][i] += o[i];
      Vec xn = rms(x[t], L.ffn_norm);
      Vec g = mv(L.gate, xn), u = mv(L.up, xn);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
      Vec dn = mv(L.down, g);
      for (int64_t i = 0; i < H; ++i) x[t][i] += dn[i];
    }
  }
  std::vector<float> out(n * c.vocab_size);
  for (int64_t t = 0; t < n; ++t) {
    Vec logits = mv(m.lm_head, rms(x[t], m.output_norm));
    for (int64_t i = 0; i < c.vocab_size; ++i) out[t * c.vocab_size + i] = logits[i];
  }
  return out;
}

}  // namespace pdserve::testing_model

#endif  // PDSERVE_TESTS_ENGINE_MODEL_TEST_UTIL_H_
