#include "engine/loader/weight_builder.h"

#include <cstdint>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace pdserve {
namespace {

// Alignment a kernel may assume for the element type.
uintptr_t TypeAlignment(DType type) { return type == DType::kF32 ? 4 : 2; }

}  // namespace

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<RawTensor> TensorSource::GetExpert(WeightKind kind,
                                                  int64_t layer,
                                                  int64_t expert) const {
  absl::StatusOr<RawTensor> t = Get(kind, layer);
  if (!t.ok()) return t.status();
  if (t->shape.size() != 3 || expert < 0 || expert >= t->shape[0] ||
      t->num_bytes % t->shape[0] != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path(), ": tensor '", t->name, "' has shape ", ShapeString(t->shape),
        " and ", t->num_bytes, " bytes; expected [experts][rows][cols] with ",
        "expert ", expert, " inside"));
  }
  RawTensor r = *t;
  r.num_bytes = t->num_bytes / t->shape[0];
  r.data = static_cast<const uint8_t*>(t->data) + expert * r.num_bytes;
  r.shape = {t->shape[1], t->shape[2]};
  r.name = absl::StrCat(t->name, "[", expert, "]");
  return r;
}

absl::StatusOr<WeightView> ViewOfTensor(const RawTensor& t, int64_t rows,
                                        int64_t cols, const std::string& source,
                                        ModelWeights& w) {
  absl::StatusOr<int64_t> row_bytes = RowBytes(t.type, cols);
  if (!row_bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": tensor '", t.name, "': ", row_bytes.status().message()));
  }
  if (t.owner != nullptr) w.storage.push_back(t.owner);
  WeightView v;
  v.type = t.type;
  v.rows = rows;
  v.cols = cols;
  v.row_bytes = *row_bytes;
  v.data = t.data;
  if (reinterpret_cast<uintptr_t>(t.data) % TypeAlignment(t.type) != 0) {
    auto copy = std::make_shared<std::vector<uint64_t>>((t.num_bytes + 7) / 8);
    std::memcpy(copy->data(), t.data, t.num_bytes);
    v.data = copy->data();
    w.storage.push_back(copy);
  }
  w.weight_bytes += t.num_bytes;
  return v;
}

absl::StatusOr<const float*> F32OfTensor(const RawTensor& t, int64_t n,
                                         const std::string& source,
                                         ModelWeights& w) {
  if (t.owner != nullptr) w.storage.push_back(t.owner);
  w.weight_bytes += n * static_cast<int64_t>(sizeof(float));
  if (t.type == DType::kF32 &&
      reinterpret_cast<uintptr_t>(t.data) % alignof(float) == 0) {
    return static_cast<const float*>(t.data);
  }
  if (n % DTypeBlockValues(t.type) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": tensor '", t.name, "': ", n, " values of ",
                     DTypeName(t.type), " are not whole blocks"));
  }
  auto owned = std::make_shared<std::vector<float>>(n);
  if (reinterpret_cast<uintptr_t>(t.data) % TypeAlignment(t.type) != 0) {
    std::vector<uint8_t> bytes(t.num_bytes);
    std::memcpy(bytes.data(), t.data, t.num_bytes);
    DequantizeRow(t.type, bytes.data(), owned->data(), n);
  } else {
    DequantizeRow(t.type, t.data, owned->data(), n);
  }
  w.storage.push_back(owned);
  return owned->data();
}

namespace {

class Builder {
 public:
  Builder(const TensorSource& source, ModelWeights& w) : src_(source), w_(w) {}

  absl::StatusOr<RawTensor> Fetch(WeightKind kind, int64_t layer,
                                  std::vector<int64_t> expected,
                                  const char* what) {
    absl::StatusOr<RawTensor> t = src_.Get(kind, layer);
    if (!t.ok()) return t.status();
    if (t->owner != nullptr) w_.storage.push_back(t->owner);
    if (t->shape != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          src_.path(), ": tensor '", t->name, "' has shape ",
          ShapeString(t->shape), ", expected ", ShapeString(expected), " (",
          what, ") from the model config"));
    }
    return t;
  }

  absl::StatusOr<WeightView> Matrix(WeightKind kind, int64_t layer,
                                    int64_t rows, int64_t cols,
                                    const char* what) {
    return View(Fetch(kind, layer, {rows, cols}, what), rows, cols);
  }

  // Expert `expert` of a kFfn*Exps kind, [rows][cols].
  absl::StatusOr<WeightView> ExpertMatrix(WeightKind kind, int64_t layer,
                                          int64_t expert, int64_t rows,
                                          int64_t cols, const char* what) {
    absl::StatusOr<RawTensor> t = src_.GetExpert(kind, layer, expert);
    if (t.ok() && t->owner != nullptr) w_.storage.push_back(t->owner);
    if (t.ok() && t->shape != std::vector<int64_t>{rows, cols}) {
      return absl::InvalidArgumentError(absl::StrCat(
          src_.path(), ": tensor '", t->name, "' has shape ",
          ShapeString(t->shape), ", expected ", ShapeString({rows, cols}),
          " (", what, ") from the model config"));
    }
    return View(std::move(t), rows, cols);
  }

  absl::StatusOr<WeightView> View(absl::StatusOr<RawTensor> t, int64_t rows,
                                  int64_t cols) {
    if (!t.ok()) return t.status();
    return ViewOfTensor(*t, rows, cols, src_.path(), w_);
  }

  absl::StatusOr<const float*> Vector(WeightKind kind, int64_t layer, int64_t n,
                                      const char* what,
                                      std::vector<int64_t> shape = {}) {
    if (shape.empty()) shape = {n};
    absl::StatusOr<RawTensor> t = Fetch(kind, layer, shape, what);
    if (!t.ok()) return t.status();
    return F32OfTensor(*t, n, src_.path(), w_);
  }

  absl::Status Layer(int64_t l, LayerWeights& lw);
  absl::Status Linear(int64_t l, LayerWeights& lw);
  absl::Status FusedQkvz(int64_t l, LayerWeights& lw);
  absl::Status FusedBa(int64_t l, LayerWeights& lw);
  WeightView PickRows(const WeightView& m, const std::vector<int64_t>& rows);
  absl::Status Attention(int64_t l, LayerWeights& lw);
  // Zero-centred RMSNorm weights (Qwen3.5: x_normed * (1 + w)) as 1 + w,
  // unless the file stores them so already.
  bool AddOne() const {
    return w_.config.ZeroCenteredNorms() && !src_.NormsStoredPlusOne();
  }
  const float* PlusOne(const float* w, int64_t n) {
    auto owned = std::make_shared<std::vector<float>>(n);
    for (int64_t i = 0; i < n; ++i) (*owned)[i] = 1.0f + w[i];
    w_.storage.push_back(owned);
    return owned->data();
  }
  absl::Status Experts(int64_t l, LayerWeights& lw);
  absl::Status Build();

 private:
  const TensorSource& src_;
  ModelWeights& w_;
};

absl::Status Builder::Layer(int64_t l, LayerWeights& lw) {
  const ModelConfig& c = w_.config;
  const int64_t h = c.hidden_size, ff = c.intermediate_size;
  using K = WeightKind;
  PDSERVE_ASSIGN_OR_RETURN(lw.attn_norm, Vector(K::kAttnNorm, l, h, "hidden_size"));
  if (c.IsLinearLayer(l)) {
    if (absl::Status s = Linear(l, lw); !s.ok()) return s;
  } else {
    if (absl::Status s = Attention(l, lw); !s.ok()) return s;
  }
  PDSERVE_ASSIGN_OR_RETURN(lw.ffn_norm, Vector(K::kFfnNorm, l, h, "hidden_size"));
  if (AddOne()) {
    lw.attn_norm = PlusOne(lw.attn_norm, h);
    lw.ffn_norm = PlusOne(lw.ffn_norm, h);
  }
  if (c.IsMoeLayer(l)) return Experts(l, lw);
  PDSERVE_ASSIGN_OR_RETURN(lw.w_gate, Matrix(K::kFfnGate, l, ff, h,
                                   "intermediate_size x hidden_size"));
  PDSERVE_ASSIGN_OR_RETURN(
      lw.w_up, Matrix(K::kFfnUp, l, ff, h, "intermediate_size x hidden_size"));
  PDSERVE_ASSIGN_OR_RETURN(lw.w_down, Matrix(K::kFfnDown, l, h, ff,
                                   "hidden_size x intermediate_size"));
  return absl::OkStatus();
}

// Rows `src_rows` of `m` (in that order) as a new owned matrix.
WeightView Builder::PickRows(const WeightView& m,
                             const std::vector<int64_t>& src_rows) {
  auto buf = std::make_shared<std::vector<uint64_t>>(
      (src_rows.size() * m.row_bytes + 7) / 8);
  auto* dst = reinterpret_cast<uint8_t*>(buf->data());
  for (size_t i = 0; i < src_rows.size(); ++i) {
    std::memcpy(dst + i * m.row_bytes, m.row(src_rows[i]), m.row_bytes);
  }
  w_.storage.push_back(buf);
  WeightView v = m;
  v.rows = static_cast<int64_t>(src_rows.size());
  v.data = buf->data();
  return v;
}

// Qwen3-Next's in_proj_qkvz rows are grouped per key head g as
// [q_g (kd) | k_g (kd) | v (r*vd) | z (r*vd)] (r = v_heads / k_heads);
// regroup them into the Qwen3.5 layout (all q | all k | all v, then z).
absl::Status Builder::FusedQkvz(int64_t l, LayerWeights& lw) {
  const ModelConfig& c = w_.config;
  const int64_t h = c.hidden_size, nk = c.linear_num_k_heads;
  const int64_t kd = c.linear_k_head_dim, vd = c.linear_v_head_dim;
  const int64_t r = c.linear_num_v_heads / nk;
  const int64_t group = 2 * kd + 2 * r * vd;
  WeightView qkvz;
  PDSERVE_ASSIGN_OR_RETURN(qkvz, Matrix(WeightKind::kLinQkvz, l, nk * group, h,
                              "2*key_dim+2*value_dim x hidden_size"));
  std::vector<int64_t> qkv, z;
  for (int part = 0; part < 3; ++part) {  // all q, then all k, then all v
    for (int64_t g = 0; g < nk; ++g) {
      const int64_t base = g * group + (part == 0 ? 0 : part == 1 ? kd : 2 * kd);
      const int64_t n = part == 2 ? r * vd : kd;
      for (int64_t i = 0; i < n; ++i) qkv.push_back(base + i);
    }
  }
  for (int64_t g = 0; g < nk; ++g) {
    for (int64_t i = 0; i < r * vd; ++i) {
      z.push_back(g * group + 2 * kd + r * vd + i);
    }
  }
  lw.lin_qkv = PickRows(qkvz, qkv);
  lw.lin_z = PickRows(qkvz, z);
  return absl::OkStatus();
}

// Qwen3-Next's in_proj_ba rows: [b (r) | a (r)] per key head g.
absl::Status Builder::FusedBa(int64_t l, LayerWeights& lw) {
  const ModelConfig& c = w_.config;
  const int64_t nk = c.linear_num_k_heads;
  const int64_t r = c.linear_num_v_heads / nk;
  WeightView ba;
  PDSERVE_ASSIGN_OR_RETURN(ba, Matrix(WeightKind::kLinBa, l, 2 * nk * r, c.hidden_size,
                            "2*linear_num_value_heads x hidden_size"));
  std::vector<int64_t> b, a;
  for (int64_t g = 0; g < nk; ++g) {
    for (int64_t i = 0; i < r; ++i) {
      b.push_back(g * 2 * r + i);
      a.push_back(g * 2 * r + r + i);
    }
  }
  lw.lin_b = PickRows(ba, b);
  lw.lin_a = PickRows(ba, a);
  return absl::OkStatus();
}

// Qwen3.5 stores the in-projections separately; Qwen3-Next checkpoints fuse
// them (in_proj_qkvz, in_proj_ba), while llama.cpp's GGUF keeps qkv and z
// separate (attn_qkv, attn_gate) and only b, a fused (ssm_ba).
absl::Status Builder::Linear(int64_t l, LayerWeights& lw) {
  const ModelConfig& c = w_.config;
  const int64_t h = c.hidden_size, nv = c.linear_num_v_heads;
  const int64_t conv = c.linear_conv_dim(), vdim = c.linear_value_dim();
  using K = WeightKind;
  const bool next = c.arch == Architecture::kQwen3Next;
  if (next && !src_.Has(K::kLinQkv, l)) {
    if (absl::Status s = FusedQkvz(l, lw); !s.ok()) return s;
  } else {
    PDSERVE_ASSIGN_OR_RETURN(lw.lin_qkv, Matrix(K::kLinQkv, l, conv, h,
                                      "2*key_dim+value_dim x hidden_size"));
    PDSERVE_ASSIGN_OR_RETURN(lw.lin_z, Matrix(K::kLinZ, l, vdim, h,
                                    "value_dim x hidden_size"));
  }
  if (next && !src_.Has(K::kLinB, l)) {
    if (absl::Status s = FusedBa(l, lw); !s.ok()) return s;
  } else {
    PDSERVE_ASSIGN_OR_RETURN(lw.lin_b, Matrix(K::kLinB, l, nv, h,
                                    "linear_num_value_heads x hidden_size"));
    PDSERVE_ASSIGN_OR_RETURN(lw.lin_a, Matrix(K::kLinA, l, nv, h,
                                    "linear_num_value_heads x hidden_size"));
  }
  PDSERVE_ASSIGN_OR_RETURN(lw.lin_out, Matrix(K::kLinOut, l, h, vdim,
                                    "hidden_size x value_dim"));
  PDSERVE_ASSIGN_OR_RETURN(lw.lin_conv,
                 Vector(K::kLinConv, l, conv * c.linear_conv_kernel,
                        "conv_dim x 1 x conv_kernel",
                        {conv, 1, c.linear_conv_kernel}));
  PDSERVE_ASSIGN_OR_RETURN(lw.lin_dt_bias, Vector(K::kLinDtBias, l, nv,
                                        "linear_num_value_heads"));
  PDSERVE_ASSIGN_OR_RETURN(lw.lin_a_log, Vector(K::kLinALog, l, nv,
                                      "linear_num_value_heads"));
  PDSERVE_ASSIGN_OR_RETURN(lw.lin_norm, Vector(K::kLinNorm, l, c.linear_v_head_dim,
                                     "linear_value_head_dim"));
  return absl::OkStatus();
}

absl::Status Builder::Attention(int64_t l, LayerWeights& lw) {
  const ModelConfig& c = w_.config;
  const int64_t h = c.hidden_size;
  using K = WeightKind;
  PDSERVE_ASSIGN_OR_RETURN(lw.wq, Matrix(K::kAttnQ, l,
                               c.attn_output_gate ? 2 * c.q_dim() : c.q_dim(),
                               h, "num_heads*head_dim (x2 with output gate) "
                               "x hidden_size"));
  PDSERVE_ASSIGN_OR_RETURN(lw.wk, Matrix(K::kAttnK, l, c.kv_dim(), h,
                               "num_kv_heads*head_dim x hidden_size"));
  PDSERVE_ASSIGN_OR_RETURN(lw.wv, Matrix(K::kAttnV, l, c.kv_dim(), h,
                               "num_kv_heads*head_dim x hidden_size"));
  PDSERVE_ASSIGN_OR_RETURN(lw.wo, Matrix(K::kAttnOutput, l, h, c.q_dim(),
                               "hidden_size x num_heads*head_dim"));
  if (c.qk_norm) {
    PDSERVE_ASSIGN_OR_RETURN(lw.q_norm, Vector(K::kAttnQNorm, l, c.head_dim, "head_dim"));
    PDSERVE_ASSIGN_OR_RETURN(lw.k_norm, Vector(K::kAttnKNorm, l, c.head_dim, "head_dim"));
    if (AddOne()) {
      lw.q_norm = PlusOne(lw.q_norm, c.head_dim);
      lw.k_norm = PlusOne(lw.k_norm, c.head_dim);
    }
  }
  return absl::OkStatus();
}

absl::Status Builder::Experts(int64_t l, LayerWeights& lw) {
  const ModelConfig& c = w_.config;
  const int64_t h = c.hidden_size, ff = c.moe_intermediate_size;
  using K = WeightKind;
  PDSERVE_ASSIGN_OR_RETURN(lw.router, Matrix(K::kFfnGateInp, l, c.num_experts, h,
                                   "num_experts x hidden_size"));
  lw.experts.resize(c.num_experts);
  for (int64_t x = 0; x < c.num_experts; ++x) {
    ExpertWeights& e = lw.experts[x];
    PDSERVE_ASSIGN_OR_RETURN(e.gate, ExpertMatrix(K::kFfnGateExps, l, x, ff, h,
                                        "moe_intermediate_size x hidden_size"));
    PDSERVE_ASSIGN_OR_RETURN(e.up, ExpertMatrix(K::kFfnUpExps, l, x, ff, h,
                                      "moe_intermediate_size x hidden_size"));
    PDSERVE_ASSIGN_OR_RETURN(e.down, ExpertMatrix(K::kFfnDownExps, l, x, h, ff,
                                        "hidden_size x moe_intermediate_size"));
  }
  const int64_t sf = c.shared_expert_intermediate_size;
  if (sf > 0) {
    PDSERVE_ASSIGN_OR_RETURN(lw.shared.gate, Matrix(K::kFfnGateShexp, l, sf, h,
                                          "shared_expert_intermediate_size x "
                                          "hidden_size"));
    PDSERVE_ASSIGN_OR_RETURN(lw.shared.up, Matrix(K::kFfnUpShexp, l, sf, h,
                                        "shared_expert_intermediate_size x "
                                        "hidden_size"));
    PDSERVE_ASSIGN_OR_RETURN(lw.shared.down, Matrix(K::kFfnDownShexp, l, h, sf,
                                          "hidden_size x "
                                          "shared_expert_intermediate_size"));
    PDSERVE_ASSIGN_OR_RETURN(lw.shared_gate,
                   Matrix(K::kFfnShexpGate, l, 1, h, "1 x hidden_size"));
  }
  return absl::OkStatus();
}

absl::Status Builder::Build() {
  const ModelConfig& c = w_.config;
  w_.storage = src_.Storage();
  w_.weight_bytes = 0;
  PDSERVE_ASSIGN_OR_RETURN(w_.token_embedding,
                 Matrix(WeightKind::kTokenEmbd, 0, c.vocab_size, c.hidden_size,
                        "vocab_size x hidden_size"));
  w_.layers.resize(c.num_layers);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (absl::Status s = Layer(l, w_.layers[l]); !s.ok()) return s;
  }
  PDSERVE_ASSIGN_OR_RETURN(w_.output_norm, Vector(WeightKind::kOutputNorm, 0,
                                        c.hidden_size, "hidden_size"));
  if (AddOne()) {
    w_.output_norm = PlusOne(w_.output_norm, c.hidden_size);
  }
  if (c.tied_embeddings) {
    w_.lm_head = w_.token_embedding;
  } else {
    PDSERVE_ASSIGN_OR_RETURN(w_.lm_head,
                   Matrix(WeightKind::kOutput, 0, c.vocab_size, c.hidden_size,
                          "vocab_size x hidden_size"));
  }
  return absl::OkStatus();
}


}  // namespace

absl::Status BuildModelWeights(const TensorSource& source,
                               ModelWeights& weights) {
  return Builder(source, weights).Build();
}

}  // namespace pdserve
