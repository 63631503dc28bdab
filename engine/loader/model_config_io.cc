#include "engine/loader/model_config_io.h"

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/loader/gguf_hybrid.h"
#include "common/status_macros.h"

namespace pdserve {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxWidth = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxVocab = int64_t{1} << 24;

absl::Status CheckRange(const std::string& source, const char* field,
                        int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", field, " = ", value, " is out of range ", lo, "..", hi));
  }
  return absl::OkStatus();
}

// GGUF helpers: `<arch>.<suffix>` with an optional default.
absl::StatusOr<int64_t> ArchInt(const GgufFile& f, const std::string& arch,
                                const char* suffix) {
  return f.GetInt(absl::StrCat(arch, ".", suffix));
}

absl::StatusOr<int64_t> ArchIntOr(const GgufFile& f, const std::string& arch,
                                  const char* suffix, int64_t fallback) {
  const std::string key = absl::StrCat(arch, ".", suffix);
  if (f.Find(key) == nullptr) return fallback;
  return f.GetInt(key);
}

absl::StatusOr<double> ArchFloatOr(const GgufFile& f, const std::string& arch,
                                   const char* suffix, double fallback) {
  const std::string key = absl::StrCat(arch, ".", suffix);
  if (f.Find(key) == nullptr) return fallback;
  return f.GetFloat(key);
}

std::string Basename(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  std::string base = slash == std::string::npos ? p : p.substr(slash + 1);
  const size_t dot = base.rfind('.');
  return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

absl::StatusOr<int64_t> GgufVocabSize(const GgufFile& f,
                                      const std::string& arch) {
  if (f.Find("tokenizer.ggml.tokens") != nullptr) {
    absl::StatusOr<const std::vector<std::string>*> tokens =
        f.GetStringArray("tokenizer.ggml.tokens");
    if (!tokens.ok()) return tokens.status();
    return static_cast<int64_t>((*tokens)->size());
  }
  if (f.Find(arch + ".vocab_size") != nullptr) {
    return f.GetInt(arch + ".vocab_size");
  }
  if (const GgufTensorInfo* t = f.FindTensor("token_embd.weight");
      t != nullptr && t->dims.size() == 2) {
    return t->dims[1];
  }
  return absl::NotFoundError(absl::StrCat(
      f.path(), ": no vocabulary size: neither tokenizer.ggml.tokens, ", arch,
      ".vocab_size nor a 2-D token_embd.weight"));
}

// RoPE scaling changes every position's rotation; refusing it beats
// silently wrong logits.
absl::Status CheckGgufUnsupported(const GgufFile& f, const std::string& arch) {
  const std::string key = arch + ".rope.scaling.type";
  if (f.Find(key) != nullptr) {
    absl::StatusOr<std::string> type = f.GetString(key);
    if (!type.ok()) return type.status();
    if (*type != "none") {
      return absl::UnimplementedError(absl::StrCat(
          f.path(), ": ", key, " = '", *type, "' is not supported"));
    }
  }
  if (f.FindTensor("rope_freqs.weight") != nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        f.path(), ": tensor 'rope_freqs.weight' (Llama 3.1 RoPE frequency ",
        "scaling) is not supported"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ConfigFromGguf(const GgufFile& f) {
  ModelConfig c;
  absl::StatusOr<std::string> arch = f.GetString("general.architecture");
  if (!arch.ok()) return arch.status();
  if (*arch == "llama") {
    c.arch = Architecture::kLlama;
    c.rope_style = RopeStyle::kInterleaved;
  } else if (*arch == "qwen3") {
    c.arch = Architecture::kQwen3;
    c.rope_style = RopeStyle::kNeox;
    c.qk_norm = true;
  } else if (*arch == "qwen3moe") {
    c.arch = Architecture::kQwen3Moe;
    c.rope_style = RopeStyle::kNeox;
    c.qk_norm = true;
  } else if (*arch == "qwen35" || *arch == "qwen3next") {
    c.arch =
        *arch == "qwen35" ? Architecture::kQwen35 : Architecture::kQwen3Next;
    c.rope_style = RopeStyle::kNeox;
    c.qk_norm = true;
  } else {
    return absl::UnimplementedError(absl::StrCat(
        f.path(), ": GGUF architecture '", *arch, "' is not supported ",
        "(supported: llama, qwen3, qwen3moe, qwen35, qwen3next)"));
  }
  const std::string& a = *arch;
  if (f.Find("general.name") != nullptr) {
    // A name of another type is an error, not a crash (fuzz_gguf found it).
    PDSERVE_ASSIGN_OR_RETURN(c.name, f.GetString("general.name"));
  } else {
    c.name = Basename(f.path());
  }
  PDSERVE_ASSIGN_OR_RETURN(c.num_layers, ArchInt(f, a, "block_count"));
  PDSERVE_ASSIGN_OR_RETURN(c.hidden_size, ArchInt(f, a, "embedding_length"));
  if (c.arch == Architecture::kQwen3Moe || c.arch == Architecture::kQwen3Next) {
    // llama.cpp: every layer is sparse, top-k weights renormalised.
    PDSERVE_ASSIGN_OR_RETURN(c.num_experts, ArchInt(f, a, "expert_count"));
    PDSERVE_ASSIGN_OR_RETURN(c.num_experts_used, ArchInt(f, a, "expert_used_count"));
    PDSERVE_ASSIGN_OR_RETURN(c.moe_intermediate_size,
                   ArchInt(f, a, "expert_feed_forward_length"));
    if (f.Find(a + ".expert_weights_norm") != nullptr) {
      PDSERVE_ASSIGN_OR_RETURN(c.norm_topk_prob, f.GetBool(a + ".expert_weights_norm"));
    }
    PDSERVE_ASSIGN_OR_RETURN(c.intermediate_size, ArchIntOr(f, a, "feed_forward_length",
                                                  c.moe_intermediate_size));
    PDSERVE_ASSIGN_OR_RETURN(c.shared_expert_intermediate_size,
                   ArchIntOr(f, a, "expert_shared_feed_forward_length", 0));
  } else {
    PDSERVE_ASSIGN_OR_RETURN(c.intermediate_size,
                   ArchInt(f, a, "feed_forward_length"));
  }
  PDSERVE_ASSIGN_OR_RETURN(c.num_heads, ArchInt(f, a, "attention.head_count"));
  PDSERVE_ASSIGN_OR_RETURN(c.num_kv_heads,
                 ArchIntOr(f, a, "attention.head_count_kv", c.num_heads));
  if (c.num_heads <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": ", a, ".attention.head_count = ", c.num_heads));
  }
  PDSERVE_ASSIGN_OR_RETURN(c.head_dim, ArchIntOr(f, a, "attention.key_length",
                                       c.hidden_size / c.num_heads));
  PDSERVE_ASSIGN_OR_RETURN(c.rope_dims,
                 ArchIntOr(f, a, "rope.dimension_count", c.head_dim));
  double theta, eps;
  PDSERVE_ASSIGN_OR_RETURN(theta, ArchFloatOr(f, a, "rope.freq_base", 10000.0));
  PDSERVE_ASSIGN_OR_RETURN(eps,
                 ArchFloatOr(f, a, "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_theta = static_cast<float>(theta);
  c.rms_norm_eps = static_cast<float>(eps);
  PDSERVE_ASSIGN_OR_RETURN(c.max_context, ArchIntOr(f, a, "context_length", 2048));
  PDSERVE_ASSIGN_OR_RETURN(c.vocab_size, GgufVocabSize(f, a));
  if (f.Find("tokenizer.ggml.bos_token_id") != nullptr) {
    PDSERVE_ASSIGN_OR_RETURN(c.bos_token_id, f.GetInt("tokenizer.ggml.bos_token_id"));
  }
  if (f.Find("tokenizer.ggml.eos_token_id") != nullptr) {
    PDSERVE_ASSIGN_OR_RETURN(c.eos_token_id, f.GetInt("tokenizer.ggml.eos_token_id"));
  }
  c.tied_embeddings = f.FindTensor("output.weight") == nullptr;
  if (c.ZeroCenteredNorms()) {
    if (absl::Status s = HybridConfigFromGguf(f, a, c); !s.ok()) return s;
  }
  if (absl::Status s = CheckGgufUnsupported(f, a); !s.ok()) return s;
  if (absl::Status s = ValidateModelConfig(c, f.path()); !s.ok()) return s;
  return c;
}

namespace {

// Reads an integer field; `fallback` < 0 means required.
absl::StatusOr<int64_t> JsonInt(const json& j, const std::string& source,
                                const char* key, int64_t fallback = -1) {
  if (!j.contains(key) || j[key].is_null()) {
    if (fallback >= 0) return fallback;
    return absl::NotFoundError(
        absl::StrCat(source, ": required field \"", key, "\" is missing"));
  }
  if (!j[key].is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": field \"", key, "\" must be an integer, found ",
                     j[key].dump()));
  }
  return j[key].get<int64_t>();
}

absl::StatusOr<double> JsonFloat(const json& j, const std::string& source,
                                 const char* key, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": field \"", key, "\" must be a number, found ",
                     j[key].dump()));
  }
  return j[key].get<double>();
}

// bos/eos ids: an integer, a list (first element) or absent (-1).
int32_t JsonTokenId(const json& j, const char* key) {
  if (!j.contains(key)) return -1;
  const json& v = j[key];
  if (v.is_number_integer()) return v.get<int32_t>();
  if (v.is_array() && !v.empty() && v[0].is_number_integer()) {
    return v[0].get<int32_t>();
  }
  return -1;
}

absl::StatusOr<Architecture> HfArchitecture(const json& j,
                                            const std::string& source) {
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() &&
      !j["architectures"].empty() && j["architectures"][0].is_string()) {
    arch = j["architectures"][0].get<std::string>();
  } else if (j.contains("model_type") && j["model_type"].is_string()) {
    arch = j["model_type"].get<std::string>();
  }
  if (arch == "LlamaForCausalLM" || arch == "llama")
    return Architecture::kLlama;
  if (arch == "Qwen3ForCausalLM" || arch == "qwen3")
    return Architecture::kQwen3;
  if (arch == "Qwen3MoeForCausalLM" || arch == "qwen3_moe")
    return Architecture::kQwen3Moe;
  if (arch == "Qwen3_5ForCausalLM" || arch == "qwen3_5_text")
    return Architecture::kQwen35;
  if (arch == "Qwen3NextForCausalLM" || arch == "qwen3_next")
    return Architecture::kQwen3Next;
  return absl::UnimplementedError(absl::StrCat(
      source, ": architecture '", arch, "' is not supported (supported: ",
      "LlamaForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, ",
      "Qwen3_5ForCausalLM, Qwen3NextForCausalLM)"));
}

// Features of the config we do not implement are errors, not silent drift.
// A RoPE parameter object (transformers v5 `rope_parameters`, v4
// `rope_scaling`) is fine when its type is "default".
absl::Status CheckRopeType(const json& j, const char* key,
                           const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  const json& r = j[key];
  std::string type = "default";
  if (r.is_object() && r.contains("rope_type") && r["rope_type"].is_string()) {
    type = r["rope_type"].get<std::string>();
  } else if (r.is_object() && r.contains("type") && r["type"].is_string()) {
    type = r["type"].get<std::string>();
  }
  if (!r.is_object() || type != "default") {
    return absl::UnimplementedError(
        absl::StrCat(source, ": ", key, " ", r.dump(),
                     " is not supported (only the ", "default RoPE)"));
  }
  return absl::OkStatus();
}

absl::Status CheckHfUnsupported(const json& j, const std::string& source) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (absl::Status s = CheckRopeType(j, key, source); !s.ok()) return s;
  }
  if (j.contains("use_sliding_window") && j["use_sliding_window"] == true) {
    return absl::UnimplementedError(
        absl::StrCat(source, ": use_sliding_window = true is not supported"));
  }
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    for (const json& t : j["layer_types"]) {
      if (t != "full_attention" && t != "linear_attention") {
        return absl::UnimplementedError(
            absl::StrCat(source, ": layer type ", t.dump(),
                         " is not supported (full_attention, ",
                         "linear_attention only)"));
      }
    }
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (j.contains(key) && j[key].is_boolean() && j[key].get<bool>()) {
      return absl::UnimplementedError(
          absl::StrCat(source, ": ", key, " = true is not supported"));
    }
  }
  if (j.contains("hidden_act") && j["hidden_act"] != "silu") {
    return absl::UnimplementedError(
        absl::StrCat(source, ": hidden_act ", j["hidden_act"].dump(),
                     " is not supported (silu only)"));
  }
  return absl::OkStatus();
}

// Qwen3MoeConfig fields (defaults as transformers).
absl::Status MoeFromHfJson(const json& j, const std::string& source,
                           ModelConfig& c) {
  // transformers v5 writes num_local_experts; published configs num_experts.
  const char* experts_key =
      j.contains("num_experts") ? "num_experts" : "num_local_experts";
  PDSERVE_ASSIGN_OR_RETURN(c.num_experts, JsonInt(j, source, experts_key));
  PDSERVE_ASSIGN_OR_RETURN(c.num_experts_used,
                 JsonInt(j, source, "num_experts_per_tok"));
  PDSERVE_ASSIGN_OR_RETURN(c.moe_intermediate_size,
                 JsonInt(j, source, "moe_intermediate_size"));
  PDSERVE_ASSIGN_OR_RETURN(c.decoder_sparse_step,
                 JsonInt(j, source, "decoder_sparse_step", 1));
  c.norm_topk_prob = !j.contains("norm_topk_prob") ||
                     !j["norm_topk_prob"].is_boolean() ||
                     j["norm_topk_prob"].get<bool>();
  PDSERVE_ASSIGN_OR_RETURN(c.shared_expert_intermediate_size,
                 JsonInt(j, source, "shared_expert_intermediate_size", 0));
  c.mlp_only_layers.clear();
  if (j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array()) {
    for (const json& l : j["mlp_only_layers"]) {
      if (!l.is_number_integer()) {
        return absl::InvalidArgumentError(absl::StrCat(
            source, ": mlp_only_layers holds ", l.dump(), ", not a layer"));
      }
      c.mlp_only_layers.push_back(l.get<int64_t>());
    }
  }
  return absl::OkStatus();
}

// Qwen3_5TextConfig: Gated DeltaNet shapes, the layer pattern (layer_types,
// else every full_attention_interval-th layer is full attention), output-
// gated attention, partial RoPE (default 0.25) and mRoPE sections.
absl::Status HybridFromHfJson(const json& j, const std::string& source,
                              ModelConfig& c) {
  PDSERVE_ASSIGN_OR_RETURN(c.num_layers, JsonInt(j, source, "num_hidden_layers"));
  PDSERVE_ASSIGN_OR_RETURN(c.linear_num_k_heads,
                 JsonInt(j, source, "linear_num_key_heads", 16));
  PDSERVE_ASSIGN_OR_RETURN(c.linear_num_v_heads,
                 JsonInt(j, source, "linear_num_value_heads", 32));
  PDSERVE_ASSIGN_OR_RETURN(c.linear_k_head_dim,
                 JsonInt(j, source, "linear_key_head_dim", 128));
  PDSERVE_ASSIGN_OR_RETURN(c.linear_v_head_dim,
                 JsonInt(j, source, "linear_value_head_dim", 128));
  PDSERVE_ASSIGN_OR_RETURN(c.linear_conv_kernel,
                 JsonInt(j, source, "linear_conv_kernel_dim", 4));
  c.attn_output_gate = true;
  c.linear_layers.assign(c.num_layers, false);
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    if (static_cast<int64_t>(j["layer_types"].size()) != c.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": layer_types has ", j["layer_types"].size(),
          " entries for ", c.num_layers, " layers"));
    }
    for (int64_t l = 0; l < c.num_layers; ++l) {
      c.linear_layers[l] = j["layer_types"][l] == "linear_attention";
    }
  } else {
    int64_t interval;
    PDSERVE_ASSIGN_OR_RETURN(interval, JsonInt(j, source, "full_attention_interval", 4));
    if (interval < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": full_attention_interval = ", interval));
    }
    for (int64_t l = 0; l < c.num_layers; ++l) {
      c.linear_layers[l] = (l + 1) % interval != 0;
    }
  }
  const json& rope =
      j.contains("rope_parameters") && j["rope_parameters"].is_object()
          ? j["rope_parameters"]
          : j;
  c.mrope_sections.clear();
  if (rope.contains("mrope_section") && rope["mrope_section"].is_array()) {
    for (const json& v : rope["mrope_section"]) {
      if (!v.is_number_integer()) {
        return absl::InvalidArgumentError(absl::StrCat(
            source, ": mrope_section holds ", v.dump()));
      }
      c.mrope_sections.push_back(v.get<int64_t>());
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ConfigFromHfJson(const json& top,
                                             const std::string& source,
                                             const std::string& name) {
  if (!top.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": config must be a JSON object"));
  }
  // Published Qwen3.5 checkpoints (Qwen3_5ForConditionalGeneration) nest the
  // language model's config in text_config; the vision tower is ignored.
  json nested;
  const bool multimodal = top.contains("text_config") &&
                          top["text_config"].is_object() &&
                          top["text_config"].contains("model_type") &&
                          top["text_config"]["model_type"] == "qwen3_5_text";
  if (multimodal) {
    nested = top["text_config"];
    nested.erase("architectures");
    for (const char* key : {"tie_word_embeddings", "bos_token_id",
                            "eos_token_id"}) {
      if (!nested.contains(key) && top.contains(key)) nested[key] = top[key];
    }
  }
  const json& j = multimodal ? nested : top;
  ModelConfig c;
  PDSERVE_ASSIGN_OR_RETURN(c.arch, HfArchitecture(j, source));
  if (absl::Status s = CheckHfUnsupported(j, source); !s.ok()) return s;
  c.name = name;
  c.rope_style = RopeStyle::kNeox;
  c.qk_norm = c.arch != Architecture::kLlama;
  if (c.arch == Architecture::kQwen3Moe ||
      c.arch == Architecture::kQwen3Next) {
    if (absl::Status s = MoeFromHfJson(j, source, c); !s.ok()) return s;
  }
  if (c.arch == Architecture::kQwen35 || c.arch == Architecture::kQwen3Next) {
    if (absl::Status s = HybridFromHfJson(j, source, c); !s.ok()) return s;
  } else if (j.contains("layer_types") && j["layer_types"].is_array()) {
    for (const json& t : j["layer_types"]) {
      if (t != "full_attention") {
        return absl::UnimplementedError(absl::StrCat(
            source, ": layer type ", t.dump(), " needs Qwen3_5ForCausalLM"));
      }
    }
  }
  PDSERVE_ASSIGN_OR_RETURN(c.vocab_size, JsonInt(j, source, "vocab_size"));
  PDSERVE_ASSIGN_OR_RETURN(c.hidden_size, JsonInt(j, source, "hidden_size"));
  PDSERVE_ASSIGN_OR_RETURN(c.intermediate_size, JsonInt(j, source, "intermediate_size"));
  PDSERVE_ASSIGN_OR_RETURN(c.num_layers, JsonInt(j, source, "num_hidden_layers"));
  PDSERVE_ASSIGN_OR_RETURN(c.num_heads, JsonInt(j, source, "num_attention_heads"));
  PDSERVE_ASSIGN_OR_RETURN(c.num_kv_heads,
                 JsonInt(j, source, "num_key_value_heads", c.num_heads));
  if (c.num_heads <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": num_attention_heads = ", c.num_heads));
  }
  PDSERVE_ASSIGN_OR_RETURN(c.head_dim,
                 JsonInt(j, source, "head_dim", c.hidden_size / c.num_heads));
  // transformers v5 nests RoPE settings in rope_parameters; v4 keeps them
  // at the top level.
  const json& rope =
      j.contains("rope_parameters") && j["rope_parameters"].is_object()
          ? j["rope_parameters"]
          : j;
  double partial, theta, eps;
  PDSERVE_ASSIGN_OR_RETURN(partial,
                 JsonFloat(j, source, "partial_rotary_factor",
                           c.ZeroCenteredNorms() ? 0.25 : 1.0));
  PDSERVE_ASSIGN_OR_RETURN(partial,
                 JsonFloat(rope, source, "partial_rotary_factor", partial));
  c.rope_dims = static_cast<int64_t>(c.head_dim * partial);
  PDSERVE_ASSIGN_OR_RETURN(theta, JsonFloat(j, source, "rope_theta", 10000.0));
  PDSERVE_ASSIGN_OR_RETURN(theta, JsonFloat(rope, source, "rope_theta", theta));
  PDSERVE_ASSIGN_OR_RETURN(eps, JsonFloat(j, source, "rms_norm_eps", 1e-6));
  c.rope_theta = static_cast<float>(theta);
  c.rms_norm_eps = static_cast<float>(eps);
  PDSERVE_ASSIGN_OR_RETURN(c.max_context,
                 JsonInt(j, source, "max_position_embeddings", 2048));
  c.tied_embeddings = j.contains("tie_word_embeddings") &&
                      j["tie_word_embeddings"].is_boolean() &&
                      j["tie_word_embeddings"].get<bool>();
  c.bos_token_id = JsonTokenId(j, "bos_token_id");
  c.eos_token_id = JsonTokenId(j, "eos_token_id");
  if (absl::Status s = ValidateModelConfig(c, source); !s.ok()) return s;
  return c;
}


ModelConfig ConfigFromLlama2c(const Llama2cHeader& h, const std::string& name) {
  ModelConfig c;
  c.arch = Architecture::kLlama;
  c.name = name;
  c.vocab_size = h.vocab_size;
  c.hidden_size = h.dim;
  c.intermediate_size = h.hidden_dim;
  c.num_layers = h.n_layers;
  c.num_heads = h.n_heads;
  c.num_kv_heads = h.n_kv_heads;
  c.head_dim = h.head_size();
  c.rope_dims = c.head_dim;
  c.rope_theta = 10000.0f;
  c.rope_style = RopeStyle::kInterleaved;
  c.rms_norm_eps = 1e-5f;
  c.max_context = h.seq_len;
  c.tied_embeddings = h.shared_classifier;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  return c;
}

absl::Status ValidateModelConfig(const ModelConfig& c,
                                 const std::string& source) {
  struct Field {
    const char* name;
    int64_t value, lo, hi;
  };
  const Field fields[] = {
      {"vocab_size", c.vocab_size, 1, kMaxVocab},
      {"hidden_size", c.hidden_size, 1, kMaxWidth},
      {"intermediate_size", c.intermediate_size, 1, kMaxWidth},
      {"num_layers", c.num_layers, 1, kMaxLayers},
      {"num_heads", c.num_heads, 1, 4096},
      {"num_kv_heads", c.num_kv_heads, 1, c.num_heads},
      {"head_dim", c.head_dim, 2, 4096},
      {"rope_dims", c.rope_dims, 2, c.head_dim},
      {"max_context", c.max_context, 1, int64_t{1} << 24},
  };
  for (const Field& f : fields) {
    if (absl::Status s = CheckRange(source, f.name, f.value, f.lo, f.hi);
        !s.ok()) {
      return s;
    }
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": num_heads ", c.num_heads, " is not a multiple of ",
        "num_kv_heads ", c.num_kv_heads));
  }
  if (c.num_experts > 0) {
    const Field moe[] = {
        {"num_experts", c.num_experts, 1, 4096},
        {"num_experts_used", c.num_experts_used, 1, c.num_experts},
        {"moe_intermediate_size", c.moe_intermediate_size, 1, kMaxWidth},
        {"decoder_sparse_step", c.decoder_sparse_step, 1, kMaxLayers},
    };
    for (const Field& f : moe) {
      if (absl::Status s = CheckRange(source, f.name, f.value, f.lo, f.hi);
          !s.ok()) {
        return s;
      }
    }
  }
  if (c.rope_dims % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": rope_dims ", c.rope_dims, " must be even"));
  }
  if (!(c.rope_theta > 0) || !(c.rms_norm_eps > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": rope_theta ", c.rope_theta, " and rms_norm_eps ",
        c.rms_norm_eps, " must be positive"));
  }
  return absl::OkStatus();
}

}  // namespace pdserve
