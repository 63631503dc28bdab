#include "engine/loader/tensor_sources.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pdserve {
namespace {

struct KindNames {
  const char* gguf;  // after "blk.N." for layer kinds
  const char* hf;    // after "model.layers.N." for layer kinds
  const char* llama2c;
  bool per_layer;
};

KindNames NamesOf(WeightKind kind) {
  switch (kind) {
    case WeightKind::kTokenEmbd:
      return {"token_embd.weight", "model.embed_tokens.weight",
              "token_embedding_table", false};
    case WeightKind::kOutputNorm:
      return {"output_norm.weight", "model.norm.weight", "rms_final_weight",
              false};
    case WeightKind::kOutput:
      return {"output.weight", "lm_head.weight", "wcls", false};
    case WeightKind::kAttnNorm:
      return {"attn_norm.weight", "input_layernorm.weight", "rms_att_weight",
              true};
    case WeightKind::kAttnQ:
      return {"attn_q.weight", "self_attn.q_proj.weight", "wq", true};
    case WeightKind::kAttnK:
      return {"attn_k.weight", "self_attn.k_proj.weight", "wk", true};
    case WeightKind::kAttnV:
      return {"attn_v.weight", "self_attn.v_proj.weight", "wv", true};
    case WeightKind::kAttnOutput:
      return {"attn_output.weight", "self_attn.o_proj.weight", "wo", true};
    case WeightKind::kAttnQNorm:
      return {"attn_q_norm.weight", "self_attn.q_norm.weight", "q_norm", true};
    case WeightKind::kAttnKNorm:
      return {"attn_k_norm.weight", "self_attn.k_norm.weight", "k_norm", true};
    case WeightKind::kFfnNorm:
      return {"ffn_norm.weight", "post_attention_layernorm.weight",
              "rms_ffn_weight", true};
    case WeightKind::kFfnGate:
      return {"ffn_gate.weight", "mlp.gate_proj.weight", "w1", true};
    case WeightKind::kFfnUp:
      return {"ffn_up.weight", "mlp.up_proj.weight", "w3", true};
    case WeightKind::kFfnDown:
      return {"ffn_down.weight", "mlp.down_proj.weight", "w2", true};
    case WeightKind::kFfnGateInp:
      return {"ffn_gate_inp.weight", "mlp.gate.weight", "", true};
    // Hugging Face: transformers v5's fused in-memory layout (the per-expert
    // checkpoint names are handled by SafetensorsSource::GetExpert).
    case WeightKind::kFfnGateExps:
      return {"ffn_gate_exps.weight", "mlp.experts.gate_up_proj", "", true};
    case WeightKind::kFfnUpExps:
      return {"ffn_up_exps.weight", "mlp.experts.gate_up_proj", "", true};
    case WeightKind::kFfnDownExps:
      return {"ffn_down_exps.weight", "mlp.experts.down_proj", "", true};
    // GGUF names as gguf-py's qwen35 / qwen3next tensor lists; those files
    // are read through MakeGgufHybridSource (gguf_hybrid.h), which undoes
    // the converter's rewrites (A_log, norms, conv shape, head order).
    case WeightKind::kLinQkv:
      return {"attn_qkv.weight", "linear_attn.in_proj_qkv.weight", "", true};
    case WeightKind::kLinZ:
      return {"attn_gate.weight", "linear_attn.in_proj_z.weight", "", true};
    case WeightKind::kLinB:
      return {"ssm_beta.weight", "linear_attn.in_proj_b.weight", "", true};
    case WeightKind::kLinA:
      return {"ssm_alpha.weight", "linear_attn.in_proj_a.weight", "", true};
    case WeightKind::kLinConv:
      return {"ssm_conv1d.weight", "linear_attn.conv1d.weight", "", true};
    case WeightKind::kLinDtBias:
      return {"ssm_dt.bias", "linear_attn.dt_bias", "", true};
    case WeightKind::kLinALog:
      return {"ssm_a", "linear_attn.A_log", "", true};
    case WeightKind::kLinNorm:
      return {"ssm_norm.weight", "linear_attn.norm.weight", "", true};
    case WeightKind::kLinOut:
      return {"ssm_out.weight", "linear_attn.out_proj.weight", "", true};
    case WeightKind::kLinQkvz:
      return {"ssm_in.weight", "linear_attn.in_proj_qkvz.weight", "", true};
    case WeightKind::kLinBa:
      return {"ssm_ba.weight", "linear_attn.in_proj_ba.weight", "", true};
    case WeightKind::kFfnGateShexp:
      return {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight",
              "", true};
    case WeightKind::kFfnUpShexp:
      return {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", "",
              true};
    case WeightKind::kFfnDownShexp:
      return {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight",
              "", true};
    case WeightKind::kFfnShexpGate:
      return {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", "",
              true};
  }
  return {"?", "?", "?", false};
}

class GgufSource : public TensorSource {
 public:
  explicit GgufSource(std::shared_ptr<const GgufFile> f) : f_(std::move(f)) {}
  std::string Name(WeightKind kind, int64_t layer) const override {
    const KindNames n = NamesOf(kind);
    return n.per_layer ? absl::StrCat("blk.", layer, ".", n.gguf) : n.gguf;
  }
  bool Has(WeightKind kind, int64_t layer) const override {
    return f_->FindTensor(Name(kind, layer)) != nullptr;
  }
  absl::StatusOr<RawTensor> Get(WeightKind kind, int64_t layer) const override {
    absl::StatusOr<const GgufTensorInfo*> t = f_->GetTensor(Name(kind, layer));
    if (!t.ok()) return t.status();
    return RawTensorFromGguf(**t);
  }
  std::vector<std::shared_ptr<const void>> Storage() const override {
    return {f_->mapping()};
  }
  const std::string& path() const override { return f_->path(); }

 private:
  std::shared_ptr<const GgufFile> f_;
};

class SafetensorsSource : public TensorSource {
 public:
  explicit SafetensorsSource(std::shared_ptr<const SafetensorsModel> m)
      : m_(std::move(m)) {}
  std::string Name(WeightKind kind, int64_t layer) const override {
    const KindNames n = NamesOf(kind);
    return n.per_layer ? absl::StrCat("model.layers.", layer, ".", n.hf) : n.hf;
  }
  bool Has(WeightKind kind, int64_t layer) const override {
    return m_->FindTensor(Resolve(Name(kind, layer))) != nullptr;
  }
  // "model.X" is looked up as "model.language_model.X" when the file holds
  // a multimodal checkpoint's language model (Qwen3.5).
  std::string Resolve(const std::string& name) const {
    if (m_->FindTensor(name) == nullptr && name.rfind("model.", 0) == 0) {
      std::string alt = "model.language_model." + name.substr(6);
      if (m_->FindTensor(alt) != nullptr) return alt;
    }
    return name;
  }
  absl::StatusOr<RawTensor> Get(WeightKind kind, int64_t layer) const override {
    absl::StatusOr<const SafetensorsTensor*> t =
        m_->GetTensor(Resolve(Name(kind, layer)));
    if (!t.ok()) return t.status();
    return RawTensorFromSafetensors(**t);
  }
  absl::StatusOr<RawTensor> GetExpert(WeightKind kind, int64_t layer,
                                      int64_t expert) const override;
  std::vector<std::shared_ptr<const void>> Storage() const override {
    return m_->mappings();
  }
  const std::string& path() const override { return m_->dir(); }

 private:
  std::shared_ptr<const SafetensorsModel> m_;
};

class Llama2cSource : public TensorSource {
 public:
  explicit Llama2cSource(Llama2cCheckpoint c) : c_(std::move(c)) {}
  std::string Name(WeightKind kind, int64_t layer) const override {
    const KindNames n = NamesOf(kind);
    return n.per_layer ? absl::StrCat(n.llama2c, "[", layer, "]") : n.llama2c;
  }
  bool Has(WeightKind kind, int64_t layer) const override {
    return kind != WeightKind::kAttnQNorm && kind != WeightKind::kAttnKNorm &&
           *NamesOf(kind).llama2c != '\0' &&
           (!NamesOf(kind).per_layer ||
            (layer >= 0 && layer < c_.header.n_layers));
  }
  absl::StatusOr<RawTensor> Get(WeightKind kind, int64_t layer) const override;
  std::vector<std::shared_ptr<const void>> Storage() const override {
    return {c_.mapping};
  }
  const std::string& path() const override { return c_.path; }

 private:
  Llama2cCheckpoint c_;
};

// Per-expert checkpoint names (model.layers.L.mlp.experts.E.gate_proj.weight,
// as published Qwen3 MoE checkpoints store them), else a slice of the fused
// gate_up_proj [E][2I][H] (gate rows first) / down_proj [E][H][I].
absl::StatusOr<RawTensor> SafetensorsSource::GetExpert(WeightKind kind,
                                                       int64_t layer,
                                                       int64_t expert) const {
  const char* proj = kind == WeightKind::kFfnGateExps ? "gate_proj"
                     : kind == WeightKind::kFfnUpExps ? "up_proj"
                                                      : "down_proj";
  const std::string name = absl::StrCat("model.layers.", layer, ".mlp.experts.",
                                        expert, ".", proj, ".weight");
  if (const SafetensorsTensor* t = m_->FindTensor(Resolve(name));
      t != nullptr) {
    return RawTensorFromSafetensors(*t);
  }
  absl::StatusOr<RawTensor> r = TensorSource::GetExpert(kind, layer, expert);
  if (!r.ok() || kind == WeightKind::kFfnDownExps) return r;
  if (r->shape.size() != 2 || r->shape[0] % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(m_->dir(), ": tensor '", r->name, "' has ",
                     r->shape.size(), " dims, expected [2*I][H] per expert"));
  }
  r->shape[0] /= 2;
  r->num_bytes /= 2;
  if (kind == WeightKind::kFfnUpExps) {
    r->data = static_cast<const uint8_t*>(r->data) + r->num_bytes;
  }
  return r;
}

absl::StatusOr<RawTensor> Llama2cSource::Get(WeightKind kind,
                                             int64_t layer) const {
  if (!Has(kind, layer)) {
    return absl::NotFoundError(absl::StrCat(
        c_.path, ": tensor '", Name(kind, layer), "' not in the checkpoint"));
  }
  const Llama2cHeader& h = c_.header;
  const int64_t dim = h.dim, kv = h.kv_dim(), hid = h.hidden_dim;
  auto slice = [layer](const float* base, int64_t rows, int64_t cols) {
    return std::make_pair(base + layer * rows * cols,
                          std::vector<int64_t>{rows, cols});
  };
  std::pair<const float*, std::vector<int64_t>> p;
  switch (kind) {
    case WeightKind::kTokenEmbd:
      p = {c_.token_embedding, {h.vocab_size, dim}};
      break;
    case WeightKind::kOutput:
      p = {c_.wcls, {h.vocab_size, dim}};
      break;
    case WeightKind::kOutputNorm:
      p = {c_.rms_final, {dim}};
      break;
    case WeightKind::kAttnNorm:
      p = {c_.rms_att + layer * dim, {dim}};
      break;
    case WeightKind::kFfnNorm:
      p = {c_.rms_ffn + layer * dim, {dim}};
      break;
    case WeightKind::kAttnQ:
      p = slice(c_.wq, dim, dim);
      break;
    case WeightKind::kAttnK:
      p = slice(c_.wk, kv, dim);
      break;
    case WeightKind::kAttnV:
      p = slice(c_.wv, kv, dim);
      break;
    case WeightKind::kAttnOutput:
      p = slice(c_.wo, dim, dim);
      break;
    case WeightKind::kFfnGate:
      p = slice(c_.w1, hid, dim);
      break;
    case WeightKind::kFfnUp:
      p = slice(c_.w3, hid, dim);
      break;
    case WeightKind::kFfnDown:
      p = slice(c_.w2, dim, hid);
      break;
    default:
      break;
  }
  RawTensor r;
  r.name = Name(kind, layer);
  r.type = DType::kF32;
  r.data = p.first;
  r.num_bytes = static_cast<int64_t>(sizeof(float));
  for (int64_t d : p.second) r.num_bytes *= d;
  r.shape = std::move(p.second);
  return r;
}

}  // namespace

RawTensor RawTensorFromGguf(const GgufTensorInfo& t) {
  RawTensor r;
  r.name = t.name;
  r.type = t.type;
  r.shape.assign(t.dims.rbegin(), t.dims.rend());
  r.data = t.data;
  r.num_bytes = t.num_bytes;
  return r;
}

RawTensor RawTensorFromSafetensors(const SafetensorsTensor& t) {
  RawTensor r;
  r.name = t.name;
  r.type = t.type;
  r.shape = t.shape;
  r.data = t.data;
  r.num_bytes = t.num_bytes;
  return r;
}

std::unique_ptr<TensorSource> MakeGgufSource(
    std::shared_ptr<const GgufFile> file) {
  return std::make_unique<GgufSource>(std::move(file));
}

std::unique_ptr<TensorSource> MakeSafetensorsSource(
    std::shared_ptr<const SafetensorsModel> model) {
  return std::make_unique<SafetensorsSource>(std::move(model));
}

std::unique_ptr<TensorSource> MakeLlama2cSource(Llama2cCheckpoint checkpoint) {
  return std::make_unique<Llama2cSource>(std::move(checkpoint));
}

}  // namespace pdserve
