#include "engine/loader/gguf_hybrid.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/loader/tensor_sources.h"
#include "common/status_macros.h"

namespace pdserve {
namespace {

constexpr int64_t kMaxSsmSize = int64_t{1} << 20;

absl::StatusOr<int64_t> SsmInt(const GgufFile& f, const std::string& key) {
  absl::StatusOr<int64_t> v = f.GetInt(key);
  if (!v.ok()) return v.status();
  if (*v < 1 || *v > kMaxSsmSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": ", key, " = ", *v, " is out of range 1..", kMaxSsmSize));
  }
  return *v;
}

// Which layers are Gated DeltaNet: attention.recurrent_layers (one flag per
// block, MTP blocks included), else every full_attention_interval-th layer
// is full attention (llama.cpp's rule).
absl::Status LinearLayers(const GgufFile& f, const std::string& p,
                          int64_t all_layers, ModelConfig& c) {
  c.linear_layers.assign(c.num_layers, false);
  const std::string key = p + "attention.recurrent_layers";
  if (f.Find(key) != nullptr) {
    absl::StatusOr<const std::vector<int64_t>*> flags = f.GetIntArray(key);
    if (!flags.ok()) return flags.status();
    if (static_cast<int64_t>((*flags)->size()) < c.num_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.path(), ": ", key, " has ", (*flags)->size(),
                       " entries for ", all_layers, " blocks"));
    }
    for (int64_t l = 0; l < c.num_layers; ++l) {
      c.linear_layers[l] = (**flags)[l] != 0;
    }
    return absl::OkStatus();
  }
  int64_t interval = 4;
  const std::string ikey = p + "full_attention_interval";
  if (f.Find(ikey) != nullptr) {
    PDSERVE_ASSIGN_OR_RETURN(interval, SsmInt(f, ikey));
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    c.linear_layers[l] = (l + 1) % interval != 0;
  }
  return absl::OkStatus();
}

// A_log from ssm_a = -exp(A_log): log(-a), nudged by an ulp or two so
// that -exp(A_log) (in float, as the forward pass computes it) gives back
// exactly `a` where some float does.
float InverseOfNegExp(float a) {
  const float target = -a;
  const float guess = std::log(target);
  float best = guess;
  float best_err = std::fabs(std::exp(guess) - target);
  float lo = guess, hi = guess;
  for (int i = 0; i < 4 && best_err > 0; ++i) {
    lo = std::nextafter(lo, -INFINITY);
    hi = std::nextafter(hi, INFINITY);
    for (float x : {lo, hi}) {
      const float err = std::fabs(std::exp(x) - target);
      if (err < best_err) {
        best = x;
        best_err = err;
      }
    }
  }
  return best;
}

}  // namespace

absl::Status HybridConfigFromGguf(const GgufFile& f, const std::string& arch,
                                  ModelConfig& c) {
  const std::string p = arch + ".";
  int64_t nextn = 0;
  if (f.Find(p + "nextn_predict_layers") != nullptr) {
    PDSERVE_ASSIGN_OR_RETURN(nextn, f.GetInt(p + "nextn_predict_layers"));
  }
  if (nextn < 0 || nextn >= c.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": ", p, "nextn_predict_layers = ", nextn,
                     " with ", p, "block_count = ", c.num_layers));
  }
  const int64_t all_layers = c.num_layers;
  c.num_layers -= nextn;  // MTP blocks follow the decoder; not run here
  int64_t inner, rank;
  PDSERVE_ASSIGN_OR_RETURN(c.linear_conv_kernel, SsmInt(f, p + "ssm.conv_kernel"));
  PDSERVE_ASSIGN_OR_RETURN(c.linear_k_head_dim, SsmInt(f, p + "ssm.state_size"));
  PDSERVE_ASSIGN_OR_RETURN(c.linear_num_k_heads, SsmInt(f, p + "ssm.group_count"));
  PDSERVE_ASSIGN_OR_RETURN(rank, SsmInt(f, p + "ssm.time_step_rank"));
  PDSERVE_ASSIGN_OR_RETURN(inner, SsmInt(f, p + "ssm.inner_size"));
  if (rank % c.linear_num_k_heads != 0 || inner % rank != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": ", p, "ssm.time_step_rank (value heads) = ", rank,
        " must be a multiple of ", p, "ssm.group_count (key heads) = ",
        c.linear_num_k_heads, " and divide ", p, "ssm.inner_size = ", inner));
  }
  c.linear_num_v_heads = rank;
  c.linear_v_head_dim = inner / rank;
  if (absl::Status s = LinearLayers(f, p, all_layers, c); !s.ok()) return s;
  c.attn_output_gate = true;  // attn_q holds [q | gate] per head
  const std::string vkey = p + "attention.value_length";
  if (f.Find(vkey) != nullptr) {
    int64_t v;
    PDSERVE_ASSIGN_OR_RETURN(v, f.GetInt(vkey));
    if (v != c.head_dim) {
      return absl::UnimplementedError(
          absl::StrCat(f.path(), ": ", vkey, " = ", v, " differs from ", p,
                       "attention.key_length = ", c.head_dim));
    }
  }
  c.mrope_sections.clear();
  const std::string skey = p + "rope.dimension_sections";
  if (c.arch == Architecture::kQwen35 && f.Find(skey) != nullptr) {
    absl::StatusOr<const std::vector<int64_t>*> s = f.GetIntArray(skey);
    if (!s.ok()) return s.status();
    if ((*s)->size() < 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": ", skey, " has ", (*s)->size(), " entries, need 3"));
    }
    // [t, h, w, e]: text uses t/h/w (Hugging Face's mrope_section).
    c.mrope_sections.assign((*s)->begin(), (*s)->begin() + 3);
  }
  return absl::OkStatus();
}

namespace {

class GgufHybridSource : public TensorSource {
 public:
  GgufHybridSource(std::shared_ptr<const GgufFile> f, const ModelConfig& c)
      : f_(std::move(f)), c_(c), base_(MakeGgufSource(f_)) {
    const int64_t nk = c.linear_num_k_heads, nv = c.linear_num_v_heads;
    tiled_ =
        c.arch == Architecture::kQwen35 && nk > 0 && nv != nk && nv % nk == 0;
  }
  std::string Name(WeightKind kind, int64_t layer) const override {
    if (kind == WeightKind::kFfnNorm) {
      return absl::StrCat("blk.", layer, ".post_attention_norm.weight");
    }
    return base_->Name(kind, layer);
  }
  bool Has(WeightKind kind, int64_t layer) const override {
    return f_->FindTensor(Name(kind, layer)) != nullptr ||
           (IsAttnQkv(kind, layer) &&
            f_->FindTensor(FusedQkvName(layer)) != nullptr);
  }
  absl::StatusOr<RawTensor> Get(WeightKind kind, int64_t layer) const override;
  absl::StatusOr<RawTensor> GetExpert(WeightKind kind, int64_t layer,
                                      int64_t expert) const override;
  bool NormsStoredPlusOne() const override { return true; }
  std::vector<std::shared_ptr<const void>> Storage() const override {
    return {f_->mapping()};
  }
  const std::string& path() const override { return f_->path(); }

 private:
  static std::string FusedQkvName(int64_t layer) {
    return absl::StrCat("blk.", layer, ".attn_qkv.weight");
  }
  bool IsAttnQkv(WeightKind kind, int64_t layer) const {
    return (kind == WeightKind::kAttnQ || kind == WeightKind::kAttnK ||
            kind == WeightKind::kAttnV) &&
           !c_.IsLinearLayer(layer);
  }
  // File position of Hugging Face value head h (tiled: h = g*r + j is
  // stored at j*n_k + g).
  int64_t FileHead(int64_t h) const {
    if (!tiled_) return h;
    const int64_t nk = c_.linear_num_k_heads;
    const int64_t r = c_.linear_num_v_heads / nk;
    return (h % r) * nk + h / r;
  }
  absl::Status Error(const RawTensor& t, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(f_->path(), ": tensor '", t.name, "' has shape ",
                     ShapeString(t.shape), ", expected ", what));
  }
  absl::StatusOr<RawTensor> Raw(const std::string& name) const;
  absl::StatusOr<std::shared_ptr<std::vector<float>>> ToF32(
      const RawTensor& t) const;
  absl::StatusOr<RawTensor> FusedAttention(WeightKind kind,
                                           int64_t layer) const;
  RawTensor PermuteRows(RawTensor t, int64_t first_row,
                        int64_t block_rows) const;
  absl::StatusOr<RawTensor> PermuteColumns(RawTensor t) const;
  absl::StatusOr<RawTensor> Conv(RawTensor t) const;
  absl::StatusOr<RawTensor> HeadVector(RawTensor t, bool a_log) const;

  std::shared_ptr<const GgufFile> f_;
  ModelConfig c_;
  std::unique_ptr<TensorSource> base_;  // llama.cpp's names
  bool tiled_ = false;  // Qwen3.5 value heads reordered by the converter
};

absl::StatusOr<RawTensor> GgufHybridSource::Raw(const std::string& name) const {
  absl::StatusOr<const GgufTensorInfo*> t = f_->GetTensor(name);
  if (!t.ok()) return t.status();
  return RawTensorFromGguf(**t);
}

// All values as f32, row by row (rows of shape.back() values).
absl::StatusOr<std::shared_ptr<std::vector<float>>> GgufHybridSource::ToF32(
    const RawTensor& t) const {
  const int64_t row = t.shape.empty() ? 0 : t.shape.back();
  absl::StatusOr<int64_t> row_bytes = RowBytes(t.type, row);
  if (!row_bytes.ok() || row <= 0 || t.num_bytes % *row_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        f_->path(), ": tensor '", t.name, "' (", DTypeName(t.type), ", shape ",
        ShapeString(t.shape), ") cannot be read as rows of ", row, " values"));
  }
  const int64_t rows = t.num_bytes / *row_bytes;
  auto out = std::make_shared<std::vector<float>>(rows * row);
  std::vector<uint64_t> aligned((*row_bytes + 7) / 8);
  for (int64_t i = 0; i < rows; ++i) {
    std::memcpy(aligned.data(),
                static_cast<const uint8_t*>(t.data) + i * *row_bytes,
                *row_bytes);
    DequantizeRow(t.type, aligned.data(), out->data() + i * row, row);
  }
  return out;
}

absl::StatusOr<RawTensor> GgufHybridSource::Get(WeightKind kind,
                                                int64_t layer) const {
  const std::string name = Name(kind, layer);
  if (f_->FindTensor(name) == nullptr) {
    if (IsAttnQkv(kind, layer) &&
        f_->FindTensor(FusedQkvName(layer)) != nullptr) {
      return FusedAttention(kind, layer);
    }
    if (kind == WeightKind::kLinQkvz) {
      return absl::NotFoundError(absl::StrCat(
          f_->path(), ": linear-attention layer ", layer, " has neither '",
          FusedQkvName(layer), "' (with 'blk.", layer,
          ".attn_gate.weight') nor the legacy '", name, "'"));
    }
  }
  RawTensor t;
  PDSERVE_ASSIGN_OR_RETURN(t, Raw(name));
  const int64_t kd = c_.linear_key_dim(), vd = c_.linear_v_head_dim;
  switch (kind) {
    case WeightKind::kLinConv:
      return Conv(std::move(t));
    case WeightKind::kLinALog:
      return HeadVector(std::move(t), /*a_log=*/true);
    case WeightKind::kLinDtBias:
      return tiled_ ? HeadVector(std::move(t), false) : t;
    case WeightKind::kLinQkv:
      return tiled_ ? PermuteRows(std::move(t), 2 * kd, vd) : t;
    case WeightKind::kLinZ:
      return tiled_ ? PermuteRows(std::move(t), 0, vd) : t;
    case WeightKind::kLinB:
    case WeightKind::kLinA:
      return tiled_ ? PermuteRows(std::move(t), 0, 1) : t;
    case WeightKind::kLinOut:
      return tiled_ ? PermuteColumns(std::move(t)) : t;
    case WeightKind::kFfnShexpGate:
      if (t.shape.size() == 1) t.shape = {1, t.shape[0]};
      return t;
    default:
      return t;
  }
}

// --fuse-qkv: rows [q with gate (2*q_dim) | k (kv_dim) | v (kv_dim)].
absl::StatusOr<RawTensor> GgufHybridSource::FusedAttention(
    WeightKind kind, int64_t layer) const {
  RawTensor t;
  PDSERVE_ASSIGN_OR_RETURN(t, Raw(FusedQkvName(layer)));
  const int64_t q = (c_.attn_output_gate ? 2 : 1) * c_.q_dim();
  const int64_t kv = c_.kv_dim();
  const std::vector<int64_t> want = {q + 2 * kv, c_.hidden_size};
  if (t.shape != want) {
    return Error(t, absl::StrCat(ShapeString(want),
                                 " (q+gate | k | v rows x hidden_size)"));
  }
  const int64_t row_bytes = t.num_bytes / want[0];
  const int64_t first = kind == WeightKind::kAttnQ   ? 0
                        : kind == WeightKind::kAttnK ? q
                                                     : q + kv;
  const int64_t rows = kind == WeightKind::kAttnQ ? q : kv;
  t.data = static_cast<const uint8_t*>(t.data) + first * row_bytes;
  t.num_bytes = rows * row_bytes;
  t.shape = {rows, c_.hidden_size};
  t.name = absl::StrCat(t.name, "[rows ", first, "..", first + rows, ")");
  return t;
}

// Rows [0, first_row) as they are, then the value heads' blocks of
// `block_rows` rows back in grouped order. A tensor of another shape is
// returned as is (the builder reports the mismatch).
RawTensor GgufHybridSource::PermuteRows(RawTensor t, int64_t first_row,
                                        int64_t block_rows) const {
  const int64_t nv = c_.linear_num_v_heads;
  if (t.shape.size() != 2 || t.shape[0] != first_row + nv * block_rows) {
    return t;
  }
  const int64_t row_bytes = t.num_bytes / t.shape[0];
  auto buf = std::make_shared<std::vector<uint64_t>>((t.num_bytes + 7) / 8);
  auto* dst = reinterpret_cast<uint8_t*>(buf->data());
  const auto* src = static_cast<const uint8_t*>(t.data);
  const int64_t block = block_rows * row_bytes, head0 = first_row * row_bytes;
  std::memcpy(dst, src, head0);
  for (int64_t h = 0; h < nv; ++h) {
    std::memcpy(dst + head0 + h * block, src + head0 + FileHead(h) * block,
                block);
  }
  t.data = buf->data();
  t.owner = std::move(buf);
  return t;
}

// out_proj [hidden][value_dim]: each row's value-head segments back in
// grouped order (segments must be whole quantization blocks).
absl::StatusOr<RawTensor> GgufHybridSource::PermuteColumns(RawTensor t) const {
  const int64_t nv = c_.linear_num_v_heads, vd = c_.linear_v_head_dim;
  if (t.shape.size() != 2 || t.shape[1] != nv * vd) return t;
  absl::StatusOr<int64_t> seg = RowBytes(t.type, vd);
  if (!seg.ok()) {
    return absl::UnimplementedError(absl::StrCat(
        f_->path(), ": tensor '", t.name, "': value heads of ", vd, " ",
        DTypeName(t.type), " values are not whole blocks, so the ",
        "converter's head order cannot be undone"));
  }
  const int64_t rows = t.shape[0], row_bytes = nv * *seg;
  auto buf = std::make_shared<std::vector<uint64_t>>((t.num_bytes + 7) / 8);
  auto* dst = reinterpret_cast<uint8_t*>(buf->data());
  const auto* src = static_cast<const uint8_t*>(t.data);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t h = 0; h < nv; ++h) {
      std::memcpy(dst + i * row_bytes + h * *seg,
                  src + i * row_bytes + FileHead(h) * *seg, *seg);
    }
  }
  t.data = buf->data();
  t.owner = std::move(buf);
  return t;
}

// ssm_conv1d [conv_dim][kernel] -> f32 [conv_dim][1][kernel], the value
// channels back in grouped order.
absl::StatusOr<RawTensor> GgufHybridSource::Conv(RawTensor t) const {
  const int64_t conv = c_.linear_conv_dim(), k = c_.linear_conv_kernel;
  if (t.shape != std::vector<int64_t>{conv, k} &&
      t.shape != std::vector<int64_t>{conv, 1, k}) {
    return Error(
        t, absl::StrCat("[", conv, ", ", k, "] (conv_dim x ssm.conv_kernel)"));
  }
  std::shared_ptr<std::vector<float>> in;
  PDSERVE_ASSIGN_OR_RETURN(in, ToF32(t));
  auto out = std::make_shared<std::vector<float>>(*in);
  const int64_t v0 = 2 * c_.linear_key_dim(), vd = c_.linear_v_head_dim;
  for (int64_t h = 0; h < c_.linear_num_v_heads; ++h) {
    std::memcpy(out->data() + (v0 + h * vd) * k,
                in->data() + (v0 + FileHead(h) * vd) * k,
                vd * k * sizeof(float));
  }
  t.type = DType::kF32;
  t.shape = {conv, 1, k};
  t.data = out->data();
  t.num_bytes = conv * k * static_cast<int64_t>(sizeof(float));
  t.owner = std::move(out);
  return t;
}

// A per-value-head vector in grouped order, as f32; for ssm_a (= -exp(A_log))
// the stored A_log = log(-ssm_a).
absl::StatusOr<RawTensor> GgufHybridSource::HeadVector(RawTensor t,
                                                       bool a_log) const {
  const int64_t nv = c_.linear_num_v_heads;
  if (t.shape != std::vector<int64_t>{nv}) return t;
  std::shared_ptr<std::vector<float>> in;
  PDSERVE_ASSIGN_OR_RETURN(in, ToF32(t));
  auto out = std::make_shared<std::vector<float>>(nv);
  for (int64_t h = 0; h < nv; ++h) {
    const float v = (*in)[FileHead(h)];
    if (a_log && !(v <= 0.0f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          f_->path(), ": tensor '", t.name, "' holds ", v, " at head ",
          FileHead(h), "; llama.cpp stores -exp(A_log), which is negative"));
    }
    (*out)[h] = a_log ? InverseOfNegExp(v) : v;
  }
  t.type = DType::kF32;
  t.data = out->data();
  t.num_bytes = nv * static_cast<int64_t>(sizeof(float));
  t.owner = std::move(out);
  return t;
}

// --fuse-gate-up-exps: ffn_gate_up_exps [experts][2*ff][hidden], each
// expert's gate rows first, then its up rows.
absl::StatusOr<RawTensor> GgufHybridSource::GetExpert(WeightKind kind,
                                                      int64_t layer,
                                                      int64_t expert) const {
  const std::string fused =
      absl::StrCat("blk.", layer, ".ffn_gate_up_exps.weight");
  if ((kind != WeightKind::kFfnGateExps && kind != WeightKind::kFfnUpExps) ||
      Has(kind, layer) || f_->FindTensor(fused) == nullptr) {
    return TensorSource::GetExpert(kind, layer, expert);
  }
  RawTensor t;
  PDSERVE_ASSIGN_OR_RETURN(t, Raw(fused));
  if (t.shape.size() != 3 || t.shape[1] % 2 != 0 || expert < 0 ||
      expert >= t.shape[0]) {
    return Error(t, absl::StrCat("[experts][2*expert_feed_forward_length]",
                                 "[hidden] holding expert ", expert));
  }
  const int64_t per_expert = t.num_bytes / t.shape[0];
  const int64_t half = per_expert / 2;
  const bool up = kind == WeightKind::kFfnUpExps;
  t.data = static_cast<const uint8_t*>(t.data) + expert * per_expert +
           (up ? half : 0);
  t.num_bytes = half;
  t.shape = {t.shape[1] / 2, t.shape[2]};
  t.name =
      absl::StrCat(t.name, "[", expert, "] (", up ? "up" : "gate", " half)");
  return t;
}


}  // namespace

std::unique_ptr<TensorSource> MakeGgufHybridSource(
    std::shared_ptr<const GgufFile> file, const ModelConfig& config) {
  return std::make_unique<GgufHybridSource>(std::move(file), config);
}

}  // namespace pdserve
