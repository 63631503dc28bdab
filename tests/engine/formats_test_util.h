// Helpers for the formats/loader tests: temporary folders and writers of
// small synthetic models in each supported format.
#ifndef PDSERVE_TESTS_ENGINE_FORMATS_TEST_UTIL_H_
#define PDSERVE_TESTS_ENGINE_FORMATS_TEST_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/formats/gguf_writer.h"
#include "kernels/dtype.h"
#include "nlohmann/json.hpp"

namespace pdserve::testing_util {

// A fresh folder under $TEST_TMPDIR or /tmp, removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    const char* base = std::getenv("TEST_TMPDIR");
    static int counter = 0;
    path_ = absl::StrCat(base != nullptr ? base : "/tmp", "/pdserve_", tag, "_",
                         getpid(), "_", counter++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Path(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

inline std::string SmolLm2Path() {
  const char* cache = std::getenv("PDSERVE_CACHE");
  const char* home = std::getenv("HOME");
  const std::string dir =
      cache != nullptr ? std::string(cache)
                       : absl::StrCat(home ? home : "/root", "/.cache/pdserve");
  return dir + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

inline std::string Stories260kPath() {
  return std::string(PDSERVE_SHARED_DIR) +
         "/models/stories260K/stories260K.bin";
}

// Hyper-parameters of a tiny synthetic decoder.
struct TinySpec {
  bool qwen3 = false;
  int64_t vocab = 64, hidden = 32, inter = 64, layers = 2, heads = 4,
          kv_heads = 2, head_dim = 8;
  bool tied = false;
  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
};

// One tensor: canonical GGUF name, shape outermost first, f32 values.
struct TinyTensor {
  std::string gguf_name;
  std::string hf_name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Deterministic pseudo-random weights for every tensor of `spec`.
inline std::vector<TinyTensor> TinyTensors(const TinySpec& s) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<TinyTensor> out;
  auto add = [&](const std::string& g, const std::string& h,
                 std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    out.push_back({g, h, std::move(shape), std::move(v)});
  };
  add("token_embd.weight", "model.embed_tokens.weight", {s.vocab, s.hidden});
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string g = absl::StrCat("blk.", l, ".");
    const std::string h = absl::StrCat("model.layers.", l, ".");
    add(g + "attn_norm.weight", h + "input_layernorm.weight", {s.hidden});
    add(g + "attn_q.weight", h + "self_attn.q_proj.weight",
        {s.q_dim(), s.hidden});
    add(g + "attn_k.weight", h + "self_attn.k_proj.weight",
        {s.kv_dim(), s.hidden});
    add(g + "attn_v.weight", h + "self_attn.v_proj.weight",
        {s.kv_dim(), s.hidden});
    add(g + "attn_output.weight", h + "self_attn.o_proj.weight",
        {s.hidden, s.q_dim()});
    if (s.qwen3) {
      add(g + "attn_q_norm.weight", h + "self_attn.q_norm.weight",
          {s.head_dim});
      add(g + "attn_k_norm.weight", h + "self_attn.k_norm.weight",
          {s.head_dim});
    }
    add(g + "ffn_norm.weight", h + "post_attention_layernorm.weight",
        {s.hidden});
    add(g + "ffn_gate.weight", h + "mlp.gate_proj.weight", {s.inter, s.hidden});
    add(g + "ffn_up.weight", h + "mlp.up_proj.weight", {s.inter, s.hidden});
    add(g + "ffn_down.weight", h + "mlp.down_proj.weight", {s.hidden, s.inter});
  }
  add("output_norm.weight", "model.norm.weight", {s.hidden});
  if (!s.tied) add("output.weight", "lm_head.weight", {s.vocab, s.hidden});
  return out;
}

// Encodes f32 values as `type` (row length = last dim).
inline std::string Encode(DType type, const std::vector<float>& v,
                          int64_t row) {
  const int64_t rows = static_cast<int64_t>(v.size()) / row;
  const int64_t row_bytes = *RowBytes(type, row);
  std::string out(rows * row_bytes, '\0');
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeRow(type, v.data() + r * row, out.data() + r * row_bytes, row);
  }
  return out;
}

// Writes a GGUF of `spec`: matrices as `matrix_type`, vectors as
// `vector_type`. `skip` drops a tensor; `mutate` may edit shapes.
inline GgufWriter TinyGguf(
    const TinySpec& s, DType matrix_type, DType vector_type,
    const std::string& skip = "",
    const std::function<void(TinyTensor&)>& mutate = nullptr) {
  GgufWriter w;
  const std::string a = s.qwen3 ? "qwen3" : "llama";
  w.SetString("general.architecture", a);
  w.SetString("general.name", "tiny-" + a);
  w.SetUint32(a + ".block_count", s.layers);
  w.SetUint32(a + ".embedding_length", s.hidden);
  w.SetUint32(a + ".feed_forward_length", s.inter);
  w.SetUint32(a + ".attention.head_count", s.heads);
  w.SetUint32(a + ".attention.head_count_kv", s.kv_heads);
  w.SetUint32(a + ".attention.key_length", s.head_dim);
  w.SetUint32(a + ".context_length", 256);
  w.SetFloat32(a + ".rope.freq_base", 1000000.0f);
  w.SetFloat32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  std::vector<std::string> tokens;
  for (int64_t i = 0; i < s.vocab; ++i) tokens.push_back(absl::StrCat("t", i));
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetUint32("tokenizer.ggml.bos_token_id", 1);
  w.SetUint32("tokenizer.ggml.eos_token_id", 2);
  for (TinyTensor t : TinyTensors(s)) {
    if (t.gguf_name == skip) continue;
    if (mutate) mutate(t);
    const DType type = t.shape.size() == 2 ? matrix_type : vector_type;
    std::vector<int64_t> dims(t.shape.rbegin(), t.shape.rend());
    const int64_t row = t.shape.back();
    (void)w.AddTensor(t.gguf_name, type, dims, Encode(type, t.values, row));
  }
  return w;
}

// One safetensors entry.
struct StEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// Serializes a safetensors file; the header is padded with spaces to a
// multiple of `pad` bytes (1 = no padding).
inline std::string SafetensorsBytes(const std::vector<StEntry>& entries,
                                    int pad = 8) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const StEntry& e : entries) {
    header[e.name] = {
        {"dtype", e.dtype},
        {"shape", e.shape},
        {"data_offsets", {data.size(), data.size() + e.bytes.size()}}};
    data += e.bytes;
  }
  std::string h = header.dump();
  while (h.size() % pad != 0) h.push_back(' ');
  std::string out(8, '\0');
  const uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  return out + h + data;
}

inline std::string HfDType(DType t) {
  return t == DType::kF32 ? "F32" : t == DType::kF16 ? "F16" : "BF16";
}

inline nlohmann::json TinyHfConfig(const TinySpec& s) {
  return {
      {"architectures", {s.qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", s.qwen3 ? "qwen3" : "llama"},
      {"vocab_size", s.vocab},
      {"hidden_size", s.hidden},
      {"intermediate_size", s.inter},
      {"num_hidden_layers", s.layers},
      {"num_attention_heads", s.heads},
      {"num_key_value_heads", s.kv_heads},
      {"head_dim", s.head_dim},
      {"rope_theta", 500000.0},
      {"rms_norm_eps", 1e-6},
      {"max_position_embeddings", 128},
      {"tie_word_embeddings", s.tied},
      {"bos_token_id", 1},
      {"eos_token_id", {2, 3}},
      {"hidden_act", "silu"},
      {"rope_scaling", nullptr}};
}

// The entries of `spec` as safetensors tensors of `type`.
inline std::vector<StEntry> TinyStEntries(const TinySpec& s, DType type) {
  std::vector<StEntry> out;
  for (const TinyTensor& t : TinyTensors(s)) {
    out.push_back({t.hf_name, HfDType(type), t.shape,
                   Encode(type, t.values, t.shape.back())});
  }
  return out;
}

}  // namespace pdserve::testing_util

#endif  // PDSERVE_TESTS_ENGINE_FORMATS_TEST_UTIL_H_
