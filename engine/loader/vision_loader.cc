#include "engine/loader/vision_loader.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/loader/tensor_sources.h"

namespace pdserve {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxVisionWidth = int64_t{1} << 16;

absl::StatusOr<int64_t> Int(const json& j, const std::string& source,
                            const char* key, int64_t fallback, int64_t lo,
                            int64_t hi) {
  int64_t v = fallback;
  if (j.contains(key) && !j[key].is_null()) {
    if (!j[key].is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": ", key, " must be an integer, got ", j[key].dump()));
    }
    v = j[key].get<int64_t>();
  }
  if (v < lo || v > hi) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", key, " = ", v, " is out of range ", lo, "..", hi));
  }
  return v;
}

absl::Status Floats3(const json& j, const char* key,
                     const std::string& source, std::array<float, 3>* out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  const json& v = j[key];
  if (v.is_number()) {
    out->fill(v.get<float>());
    return absl::OkStatus();
  }
  if (!v.is_array() || v.size() != 3 || !v[0].is_number() ||
      !v[1].is_number() || !v[2].is_number()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", key, " must be 3 numbers, got ", v.dump()));
  }
  for (int c = 0; c < 3; ++c) (*out)[c] = v[c].get<float>();
  return absl::OkStatus();
}

// Checks the derived shapes every consumer relies on.
absl::Status CheckVision(const VisionConfig& v, const std::string& source) {
  const ImagePreprocessConfig& p = v.preprocess;
  const int64_t side = v.grid_side();
  std::string bad;
  if (v.num_heads < 1 || v.hidden_size % v.num_heads != 0 ||
      v.head_dim() % 4 != 0) {
    bad = absl::StrCat("hidden_size ", v.hidden_size, " over ", v.num_heads,
                       " heads (head_dim must be a multiple of 4)");
  } else if (side < 1 || side * side != v.num_position_embeddings) {
    bad = absl::StrCat("num_position_embeddings ", v.num_position_embeddings,
                       " is not a square");
  } else if (p.patch_size < 1 || p.temporal_patch_size < 1 ||
             p.merge_size < 1 || p.min_pixels < 1 ||
             p.max_pixels < p.min_pixels) {
    bad = absl::StrCat("patch ", p.patch_size, ", temporal patch ",
                       p.temporal_patch_size, ", merge ", p.merge_size,
                       ", pixels ", p.min_pixels, "..", p.max_pixels);
  } else if (v.in_channels != 3) {
    bad = absl::StrCat("in_channels ", v.in_channels, " (3 supported)");
  }
  if (!bad.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": vision tower: ", bad));
  }
  return absl::OkStatus();
}

int32_t TokenId(const json& j, const char* key) {
  return j.contains(key) && j[key].is_number_integer()
             ? j[key].get<int32_t>()
             : -1;
}

}  // namespace

absl::StatusOr<VisionConfig> VisionConfigFromHfJson(
    const json& config, const json& preprocessor, const std::string& source) {
  VisionConfig v;
  if (!config.is_object() || !config.contains("vision_config") ||
      !config["vision_config"].is_object()) {
    return v;
  }
  const json& j = config["vision_config"];
  const std::string src = source + " vision_config";
  PDSERVE_ASSIGN_OR_RETURN(v.depth, Int(j, src, "depth", -1, 1, 1024));
  PDSERVE_ASSIGN_OR_RETURN(v.hidden_size,
                           Int(j, src, "hidden_size", -1, 1, kMaxVisionWidth));
  PDSERVE_ASSIGN_OR_RETURN(v.num_heads, Int(j, src, "num_heads", -1, 1, 1024));
  PDSERVE_ASSIGN_OR_RETURN(
      v.intermediate_size,
      Int(j, src, "intermediate_size", -1, 1, kMaxVisionWidth * 8));
  PDSERVE_ASSIGN_OR_RETURN(
      v.out_hidden_size,
      Int(j, src, "out_hidden_size", -1, 1, kMaxVisionWidth * 8));
  PDSERVE_ASSIGN_OR_RETURN(v.in_channels,
                           Int(j, src, "in_channels", 3, 1, 16));
  PDSERVE_ASSIGN_OR_RETURN(
      v.num_position_embeddings,
      Int(j, src, "num_position_embeddings", 2304, 1, int64_t{1} << 24));
  ImagePreprocessConfig& p = v.preprocess;
  PDSERVE_ASSIGN_OR_RETURN(p.patch_size, Int(j, src, "patch_size", 16, 1, 1024));
  PDSERVE_ASSIGN_OR_RETURN(p.temporal_patch_size,
                           Int(j, src, "temporal_patch_size", 2, 1, 16));
  PDSERVE_ASSIGN_OR_RETURN(p.merge_size,
                           Int(j, src, "spatial_merge_size", 2, 1, 16));
  const std::string act =
      j.contains("hidden_act") && j["hidden_act"].is_string()
          ? j["hidden_act"].get<std::string>()
          : "gelu_pytorch_tanh";
  if (act != "gelu_pytorch_tanh" && act != "gelu") {
    return absl::UnimplementedError(absl::StrCat(
        src, ": hidden_act \"", act,
        "\" is not supported (gelu_pytorch_tanh, gelu)"));
  }
  v.gelu_tanh = act == "gelu_pytorch_tanh";
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const json& r = j["rope_parameters"];
    if (r.contains("rope_type") && r["rope_type"] != "axial") {
      return absl::UnimplementedError(absl::StrCat(
          src, ": rope_type ", r["rope_type"].dump(), " (axial only)"));
    }
    if (r.contains("rope_theta") && r["rope_theta"].is_number()) {
      v.rope_theta = r["rope_theta"].get<float>();
    }
  }
  v.image_token_id = TokenId(config, "image_token_id");
  v.vision_start_token_id = TokenId(config, "vision_start_token_id");
  v.vision_end_token_id = TokenId(config, "vision_end_token_id");
  if (preprocessor.is_object()) {
    const std::string psrc = source + " preprocessor_config.json";
    const json& pp = preprocessor;
    PDSERVE_ASSIGN_OR_RETURN(p.patch_size,
                             Int(pp, psrc, "patch_size", p.patch_size, 1, 1024));
    PDSERVE_ASSIGN_OR_RETURN(
        p.temporal_patch_size,
        Int(pp, psrc, "temporal_patch_size", p.temporal_patch_size, 1, 16));
    PDSERVE_ASSIGN_OR_RETURN(p.merge_size,
                             Int(pp, psrc, "merge_size", p.merge_size, 1, 16));
    // transformers v5 keeps the limits in size; v4 in min/max_pixels.
    const json& size = pp.contains("size") && pp["size"].is_object()
                           ? pp["size"] : json::object();
    PDSERVE_ASSIGN_OR_RETURN(
        p.min_pixels, Int(pp, psrc, "min_pixels", p.min_pixels, 1, int64_t{1} << 40));
    PDSERVE_ASSIGN_OR_RETURN(
        p.max_pixels, Int(pp, psrc, "max_pixels", p.max_pixels, 1, int64_t{1} << 40));
    PDSERVE_ASSIGN_OR_RETURN(
        p.min_pixels, Int(size, psrc, "shortest_edge", p.min_pixels, 1, int64_t{1} << 40));
    PDSERVE_ASSIGN_OR_RETURN(
        p.max_pixels, Int(size, psrc, "longest_edge", p.max_pixels, 1, int64_t{1} << 40));
    PDSERVE_RETURN_IF_ERROR(Floats3(pp, "image_mean", psrc, &p.mean));
    PDSERVE_RETURN_IF_ERROR(Floats3(pp, "image_std", psrc, &p.std));
  }
  PDSERVE_RETURN_IF_ERROR(CheckVision(v, source));
  return v;
}

absl::StatusOr<VisionConfig> VisionConfigFromMmproj(const GgufFile& f) {
  PDSERVE_ASSIGN_OR_RETURN(std::string proj, f.GetString("clip.projector_type"));
  if (proj != "qwen3vl_merger") {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": clip.projector_type \"", proj,
        "\" is not supported (qwen3vl_merger: Qwen3-VL / Qwen3.5)"));
  }
  if (const GgufValue* ds = f.Find("clip.vision.is_deepstack_layers");
      ds != nullptr) {
    for (int64_t on : ds->ints) {
      if (on != 0) {
        return absl::UnimplementedError(absl::StrCat(
            f.path(), ": deepstack vision layers (Qwen3-VL) are not "
            "supported; Qwen3.5's tower has none"));
      }
    }
  }
  VisionConfig v;
  auto get = [&](const char* key, int64_t* out) {
    absl::StatusOr<int64_t> x = f.GetInt(absl::StrCat("clip.vision.", key));
    if (x.ok()) *out = *x;
    return x.status();
  };
  PDSERVE_RETURN_IF_ERROR(get("block_count", &v.depth));
  PDSERVE_RETURN_IF_ERROR(get("embedding_length", &v.hidden_size));
  PDSERVE_RETURN_IF_ERROR(get("attention.head_count", &v.num_heads));
  PDSERVE_RETURN_IF_ERROR(get("feed_forward_length", &v.intermediate_size));
  PDSERVE_RETURN_IF_ERROR(get("projection_dim", &v.out_hidden_size));
  PDSERVE_RETURN_IF_ERROR(get("patch_size", &v.preprocess.patch_size));
  if (f.Find("clip.vision.spatial_merge_size") != nullptr) {
    PDSERVE_RETURN_IF_ERROR(
        get("spatial_merge_size", &v.preprocess.merge_size));
  }
  const std::pair<const char*, int64_t*> limits[] = {
      {"image_min_pixels", &v.preprocess.min_pixels},
      {"image_max_pixels", &v.preprocess.max_pixels}};
  for (const auto& [key, dst] : limits) {
    if (f.Find(absl::StrCat("clip.vision.", key)) != nullptr) {
      PDSERVE_RETURN_IF_ERROR(get(key, dst));
    }
  }
  if (f.Find("clip.vision.attention.layer_norm_epsilon") != nullptr) {
    PDSERVE_ASSIGN_OR_RETURN(
        double eps, f.GetFloat("clip.vision.attention.layer_norm_epsilon"));
    v.layer_norm_eps = static_cast<float>(eps);
  }
  const std::pair<const char*, std::array<float, 3>*> norms[] = {
      {"clip.vision.image_mean", &v.preprocess.mean},
      {"clip.vision.image_std", &v.preprocess.std}};
  for (const auto& [key, dst] : norms) {
    if (f.Find(key) == nullptr) continue;
    PDSERVE_ASSIGN_OR_RETURN(std::vector<double> x, f.GetFloatArray(key));
    if (x.size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": ", key, " has ", x.size(), " values, expected 3"));
    }
    for (int c = 0; c < 3; ++c) (*dst)[c] = static_cast<float>(x[c]);
  }
  const GgufTensorInfo* pos = f.FindTensor("v.position_embd.weight");
  if (pos == nullptr || pos->dims.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": no 2-D v.position_embd.weight (learned positions)"));
  }
  v.num_position_embeddings = pos->dims[1];
  v.preprocess.temporal_patch_size =
      f.FindTensor("v.patch_embd.weight.1") != nullptr ? 2 : 1;
  PDSERVE_RETURN_IF_ERROR(CheckVision(v, f.path()));
  return v;
}

absl::Status VisionTokenIdsFromGguf(const GgufFile& text, VisionConfig* v) {
  PDSERVE_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens,
                           text.GetStringArray("tokenizer.ggml.tokens"));
  struct Want {
    const char* text;
    int32_t* id;
  } wants[] = {{"<|image_pad|>", &v->image_token_id},
               {"<|vision_start|>", &v->vision_start_token_id},
               {"<|vision_end|>", &v->vision_end_token_id}};
  for (const Want& want : wants) {
    *want.id = -1;
    for (size_t i = 0; i < tokens->size(); ++i) {
      if ((*tokens)[i] == want.text) *want.id = static_cast<int32_t>(i);
    }
    if (*want.id < 0) {
      return absl::NotFoundError(absl::StrCat(
          text.path(), ": the vocabulary has no ", want.text, " token"));
    }
  }
  return absl::OkStatus();
}

namespace {

// Fetches tensors by name and checks their shapes.
class VisionBuilder {
 public:
  VisionBuilder(const TensorLookup& get, const std::string& source,
                ModelWeights& w)
      : get_(get), source_(source), w_(w) {}

  absl::StatusOr<RawTensor> Fetch(const std::string& name,
                                  const std::vector<int64_t>& shape) {
    PDSERVE_ASSIGN_OR_RETURN(RawTensor t, get_(name));
    if (t.shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          source_, ": tensor '", name, "' has shape ", ShapeString(t.shape),
          ", expected ", ShapeString(shape), " from the vision config"));
    }
    return t;
  }
  absl::StatusOr<WeightView> Matrix(const std::string& name, int64_t rows,
                                    int64_t cols) {
    PDSERVE_ASSIGN_OR_RETURN(RawTensor t, Fetch(name, {rows, cols}));
    return ViewOfTensor(t, rows, cols, source_, w_);
  }
  absl::StatusOr<const float*> Vector(const std::string& name, int64_t n,
                                      std::vector<int64_t> shape = {}) {
    PDSERVE_ASSIGN_OR_RETURN(RawTensor t,
                             Fetch(name, shape.empty() ? std::vector{n} : shape));
    return F32OfTensor(t, n, source_, w_);
  }
  // The patch embedding as one f32 matrix [hidden][C][T][P][P], from one
  // Conv3d kernel (HF) or T Conv2d kernels [hidden][C][P][P] (mmproj).
  absl::StatusOr<WeightView> PatchEmbed(const std::vector<std::string>& names,
                                        const VisionConfig& c) {
    const int64_t hid = c.hidden_size, ch = c.in_channels;
    const int64_t t = c.preprocess.temporal_patch_size;
    const int64_t p = c.preprocess.patch_size;
    auto owned = std::make_shared<std::vector<float>>(hid * c.patch_dim());
    const int64_t plane = p * p;
    for (size_t k = 0; k < names.size(); ++k) {
      const bool conv3d = names.size() == 1;
      const std::vector<int64_t> shape =
          conv3d ? std::vector<int64_t>{hid, ch, t, p, p}
                 : std::vector<int64_t>{hid, ch, p, p};
      PDSERVE_ASSIGN_OR_RETURN(RawTensor raw, Fetch(names[k], shape));
      const int64_t n = conv3d ? c.patch_dim() : ch * plane;
      std::vector<float> row(n);
      PDSERVE_ASSIGN_OR_RETURN(WeightView view,
                               ViewOfTensor(raw, hid, n, source_, w_));
      for (int64_t o = 0; o < hid; ++o) {
        DequantizeRow(view.type, view.row(o), row.data(), n);
        float* dst = owned->data() + o * c.patch_dim();
        if (conv3d) {
          std::copy(row.begin(), row.end(), dst);
          continue;
        }
        for (int64_t cc = 0; cc < ch; ++cc) {
          std::copy(row.begin() + cc * plane, row.begin() + (cc + 1) * plane,
                    dst + (cc * t + static_cast<int64_t>(k)) * plane);
        }
      }
    }
    w_.storage.push_back(owned);
    WeightView v;
    v.type = DType::kF32;
    v.rows = hid;
    v.cols = c.patch_dim();
    v.row_bytes = v.cols * static_cast<int64_t>(sizeof(float));
    v.data = owned->data();
    return v;
  }

 private:
  const TensorLookup& get_;
  const std::string& source_;
  ModelWeights& w_;
};

// File names of one weight in each naming.
struct VisionNames {
  std::string patch_bias, pos, merger_norm, merger_fc1, merger_fc2;
  std::vector<std::string> patch;
  std::string Block(int64_t b, const char* hf, const char* gguf) const {
    return mmproj ? absl::StrCat("v.blk.", b, ".", gguf)
                  : absl::StrCat(prefix, "blocks.", b, ".", hf);
  }
  bool mmproj = false;
  std::string prefix;
};

VisionNames NamesFor(VisionNaming naming, const std::string& prefix,
                     int64_t temporal) {
  VisionNames n;
  n.mmproj = naming == VisionNaming::kMmproj;
  n.prefix = prefix;
  if (n.mmproj) {
    n.patch = {"v.patch_embd.weight"};
    for (int64_t t = 1; t < temporal; ++t) {
      n.patch.push_back(absl::StrCat("v.patch_embd.weight.", t));
    }
    n.patch_bias = "v.patch_embd.bias";
    n.pos = "v.position_embd.weight";
    n.merger_norm = "v.post_ln.";
    n.merger_fc1 = "mm.0.";
    n.merger_fc2 = "mm.2.";
  } else {
    n.patch = {prefix + "patch_embed.proj.weight"};
    n.patch_bias = prefix + "patch_embed.proj.bias";
    n.pos = prefix + "pos_embed.weight";
    n.merger_norm = prefix + "merger.norm.";
    n.merger_fc1 = prefix + "merger.linear_fc1.";
    n.merger_fc2 = prefix + "merger.linear_fc2.";
  }
  return n;
}

absl::Status BuildBlock(VisionBuilder& b, const VisionNames& n, int64_t i,
                        const VisionConfig& c, VisionBlockWeights& bw) {
  const int64_t hid = c.hidden_size, inter = c.intermediate_size;
  auto w = [&](const char* hf, const char* gguf) {
    return n.Block(i, hf, gguf);
  };
  PDSERVE_ASSIGN_OR_RETURN(bw.ln1_w, b.Vector(w("norm1.weight", "ln1.weight"), hid));
  PDSERVE_ASSIGN_OR_RETURN(bw.ln1_b, b.Vector(w("norm1.bias", "ln1.bias"), hid));
  PDSERVE_ASSIGN_OR_RETURN(
      bw.qkv, b.Matrix(w("attn.qkv.weight", "attn_qkv.weight"), 3 * hid, hid));
  PDSERVE_ASSIGN_OR_RETURN(
      bw.qkv_b, b.Vector(w("attn.qkv.bias", "attn_qkv.bias"), 3 * hid));
  PDSERVE_ASSIGN_OR_RETURN(
      bw.proj, b.Matrix(w("attn.proj.weight", "attn_out.weight"), hid, hid));
  PDSERVE_ASSIGN_OR_RETURN(
      bw.proj_b, b.Vector(w("attn.proj.bias", "attn_out.bias"), hid));
  PDSERVE_ASSIGN_OR_RETURN(bw.ln2_w, b.Vector(w("norm2.weight", "ln2.weight"), hid));
  PDSERVE_ASSIGN_OR_RETURN(bw.ln2_b, b.Vector(w("norm2.bias", "ln2.bias"), hid));
  PDSERVE_ASSIGN_OR_RETURN(
      bw.fc1, b.Matrix(w("mlp.linear_fc1.weight", "ffn_up.weight"), inter, hid));
  PDSERVE_ASSIGN_OR_RETURN(
      bw.fc1_b, b.Vector(w("mlp.linear_fc1.bias", "ffn_up.bias"), inter));
  PDSERVE_ASSIGN_OR_RETURN(
      bw.fc2, b.Matrix(w("mlp.linear_fc2.weight", "ffn_down.weight"), hid, inter));
  PDSERVE_ASSIGN_OR_RETURN(
      bw.fc2_b, b.Vector(w("mlp.linear_fc2.bias", "ffn_down.bias"), hid));
  return absl::OkStatus();
}

}  // namespace

absl::Status BuildVisionWeights(const TensorLookup& get, VisionNaming naming,
                                const std::string& prefix,
                                const std::string& source, ModelWeights& w) {
  const VisionConfig& c = w.config.vision;
  if (!c.present()) return absl::OkStatus();
  VisionBuilder b(get, source, w);
  const VisionNames n =
      NamesFor(naming, prefix, c.preprocess.temporal_patch_size);
  VisionWeights& v = w.vision;
  const int64_t hid = c.hidden_size;
  const int64_t merged = hid * c.merge_size() * c.merge_size();
  PDSERVE_ASSIGN_OR_RETURN(v.patch_embed, b.PatchEmbed(n.patch, c));
  PDSERVE_ASSIGN_OR_RETURN(v.patch_bias, b.Vector(n.patch_bias, hid));
  PDSERVE_ASSIGN_OR_RETURN(
      v.pos_embed, b.Vector(n.pos, c.num_position_embeddings * hid,
                            {c.num_position_embeddings, hid}));
  v.blocks.resize(c.depth);
  for (int64_t i = 0; i < c.depth; ++i) {
    PDSERVE_RETURN_IF_ERROR(BuildBlock(b, n, i, c, v.blocks[i]));
  }
  PDSERVE_ASSIGN_OR_RETURN(v.merger_norm_w, b.Vector(n.merger_norm + "weight", hid));
  PDSERVE_ASSIGN_OR_RETURN(v.merger_norm_b, b.Vector(n.merger_norm + "bias", hid));
  PDSERVE_ASSIGN_OR_RETURN(v.merger_fc1,
                           b.Matrix(n.merger_fc1 + "weight", merged, merged));
  PDSERVE_ASSIGN_OR_RETURN(v.merger_fc1_b, b.Vector(n.merger_fc1 + "bias", merged));
  PDSERVE_ASSIGN_OR_RETURN(
      v.merger_fc2, b.Matrix(n.merger_fc2 + "weight", c.out_hidden_size, merged));
  PDSERVE_ASSIGN_OR_RETURN(v.merger_fc2_b,
                           b.Vector(n.merger_fc2 + "bias", c.out_hidden_size));
  return absl::OkStatus();
}

absl::Status AttachMmproj(const std::string& path, const GgufFile* text_model,
                          ModelWeights& w) {
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> opened,
                           GgufFile::Open(path));
  std::shared_ptr<const GgufFile> f = std::move(opened);
  PDSERVE_ASSIGN_OR_RETURN(VisionConfig v, VisionConfigFromMmproj(*f));
  if (v.out_hidden_size != w.config.hidden_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the vision tower projects to ", v.out_hidden_size,
        " features but model ", w.config.name, " has hidden_size ",
        w.config.hidden_size));
  }
  if (text_model != nullptr) {
    PDSERVE_RETURN_IF_ERROR(VisionTokenIdsFromGguf(*text_model, &v));
  }
  w.config.vision = v;
  w.storage.push_back(f->mapping());
  TensorLookup get = [&f](const std::string& name)
      -> absl::StatusOr<RawTensor> {
    PDSERVE_ASSIGN_OR_RETURN(const GgufTensorInfo* t, f->GetTensor(name));
    return RawTensorFromGguf(*t);
  };
  return BuildVisionWeights(get, VisionNaming::kMmproj, "", path, w);
}

}  // namespace pdserve
