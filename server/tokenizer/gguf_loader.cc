// GGUF vocabulary loading and Tokenizer::Load / FromGguf.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "engine/formats/gguf.h"
#include "server/tokenizer/loaders.h"
#include "server/tokenizer/tokenizer.h"

namespace pdserve {
namespace {

// Optional integer key: the value, or `fallback` when absent.
absl::StatusOr<int64_t> IntOr(const GgufFile& f, std::string_view key,
                              int64_t fallback) {
  if (f.Find(key) == nullptr) return fallback;
  return f.GetInt(key);
}

absl::StatusOr<bool> BoolOr(const GgufFile& f, std::string_view key,
                            bool fallback) {
  if (f.Find(key) == nullptr) return fallback;
  return f.GetBool(key);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

namespace {

absl::Status ReadTypes(const GgufFile& f, VocabSpec* spec) {
  if (f.Find("tokenizer.ggml.token_type") == nullptr) return absl::OkStatus();
  auto types = f.GetIntArray("tokenizer.ggml.token_type");
  if (!types.ok()) return types.status();
  if ((*types)->size() != spec->tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": tokenizer.ggml.token_type has ", (*types)->size(),
        " entries for ", spec->tokens.size(), " tokens"));
  }
  spec->types.reserve(spec->tokens.size());
  for (int64_t t : **types) {
    spec->types.push_back(t >= 0 && t <= 6 ? static_cast<TokenType>(t)
                                           : TokenType::kNormal);
  }
  return absl::OkStatus();
}

absl::Status ReadSpecialIds(const GgufFile& f, VocabSpec* spec) {
  const int64_t n = static_cast<int64_t>(spec->tokens.size());
  struct IdKey {
    int32_t* id;
    const char* key;
  };
  for (const IdKey& k : {IdKey{&spec->bos, "tokenizer.ggml.bos_token_id"},
                         IdKey{&spec->eos, "tokenizer.ggml.eos_token_id"},
                         IdKey{&spec->unk, "tokenizer.ggml.unknown_token_id"},
                         IdKey{&spec->eot, "tokenizer.ggml.eot_token_id"},
                         IdKey{&spec->eom, "tokenizer.ggml.eom_token_id"}}) {
    auto v = IntOr(f, k.key, -1);
    if (!v.ok()) return v.status();
    if (*v < -1 || *v >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.path(), ": ", k.key, " = ", *v,
                       " is outside the vocabulary of ", n));
    }
    *k.id = static_cast<int32_t>(*v);
  }
  return absl::OkStatus();
}

// tokenizer.ggml.model "gpt2": pre-tokenizer and merges.
absl::Status ReadByteLevelBpe(const GgufFile& f, VocabSpec* spec) {
  spec->model = VocabModel::kByteLevelBpe;
  std::string pre = "default";
  if (f.Find("tokenizer.ggml.pre") != nullptr) {
    auto p = f.GetString("tokenizer.ggml.pre");
    if (!p.ok()) return p.status();
    pre = *p;
  }
  auto kind = PreTokenizerFromGgufName(pre);
  if (!kind.ok()) {
    return absl::UnimplementedError(
        absl::StrCat(f.path(), ": ", kind.status().message()));
  }
  spec->pre = *kind;
  // The Hugging Face reference normalises Qwen2 text to NFC; Qwen3.5's
  // tokenizer.json has no normaliser (llama.cpp's ggml-vocab-qwen35 vectors
  // keep "e" + U+0301 as two tokens).
  spec->nfc = spec->pre == PreTokenizerKind::kQwen2;
  spec->ignore_merges = spec->pre == PreTokenizerKind::kLlama3;
  spec->add_bos = spec->pre == PreTokenizerKind::kLlama3;
  auto merges = f.GetStringArray("tokenizer.ggml.merges");
  if (!merges.ok()) return merges.status();
  spec->merges.reserve((*merges)->size());
  for (size_t i = 0; i < (*merges)->size(); ++i) {
    const std::string& m = (**merges)[i];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": merge ", i, " ('", m, "') has no space separator"));
    }
    spec->merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<VocabSpec> VocabFromGguf(const GgufFile& f) {
  VocabSpec spec;
  auto model = f.GetString("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  auto tokens = f.GetStringArray("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  spec.tokens = **tokens;
  if (absl::Status s = ReadTypes(f, &spec); !s.ok()) return s;
  if (absl::Status s = ReadSpecialIds(f, &spec); !s.ok()) return s;
  if (f.Find("tokenizer.chat_template") != nullptr) {
    auto s = f.GetString("tokenizer.chat_template");
    if (!s.ok()) return s.status();
    spec.chat_template = *s;
  }
  if (*model == "llama") {
    spec.model = VocabModel::kSentencePiece;
    auto scores = f.GetFloatArray("tokenizer.ggml.scores");
    if (!scores.ok()) return scores.status();
    spec.scores.assign(scores->begin(), scores->end());
    spec.add_bos = true;
    spec.add_space_prefix = true;
  } else if (*model == "gpt2") {
    if (absl::Status s = ReadByteLevelBpe(f, &spec); !s.ok()) return s;
  } else {
    return absl::UnimplementedError(
        absl::StrCat(f.path(), ": tokenizer.ggml.model '", *model,
                     "' is not supported (supported: gpt2, llama)"));
  }
  auto add_bos = BoolOr(f, "tokenizer.ggml.add_bos_token", spec.add_bos);
  if (!add_bos.ok()) return add_bos.status();
  spec.add_bos = *add_bos;
  auto prefix =
      BoolOr(f, "tokenizer.ggml.add_space_prefix", spec.add_space_prefix);
  if (!prefix.ok()) return prefix.status();
  spec.add_space_prefix =
      spec.model == VocabModel::kSentencePiece ? *prefix : false;
  return spec;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(
    const GgufFile& file) {
  auto spec = VocabFromGguf(file);
  if (!spec.ok()) return spec.status();
  return BuildTokenizer(*std::move(spec));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(
    const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::string json = (fs::path(path) / "tokenizer.json").string();
    if (fs::exists(json, ec)) return Load(json);
    const std::string bin = (fs::path(path) / "tokenizer.bin").string();
    if (fs::exists(bin, ec)) return Load(bin);
    return absl::NotFoundError(absl::StrCat(
        path, " is a folder without tokenizer.json or tokenizer.bin"));
  }
  char magic[4] = {0, 0, 0, 0};
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
    in.read(magic, 4);
  }
  if (std::string_view(magic, 4) == "GGUF") {
    auto file = GgufFile::Open(path);
    if (!file.ok()) return file.status();
    return FromGguf(**file);
  }
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  const size_t first = bytes->find_first_not_of(" \t\r\n");
  absl::StatusOr<VocabSpec> spec;
  if (first != std::string::npos && (*bytes)[first] == '{') {
    std::string config;
    const fs::path cfg = fs::path(path).parent_path() / "tokenizer_config.json";
    if (fs::exists(cfg, ec)) {
      auto c = ReadFile(cfg.string());
      if (!c.ok()) return c.status();
      config = *std::move(c);
    }
    spec = VocabFromHfJson(*bytes, config);
  } else {
    spec = VocabFromLlama2c(*bytes);
  }
  if (!spec.ok()) {
    return absl::Status(spec.status().code(),
                        absl::StrCat(path, ": ", spec.status().message()));
  }
  return BuildTokenizer(*std::move(spec));
}

}  // namespace pdserve
