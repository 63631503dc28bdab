// Hugging Face tokenizer.json and llama2.c tokenizer.bin loading.
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/tokenizer/loaders.h"

namespace pdserve {
namespace {

using Json = nlohmann::json;

std::string Dump(const Json& j) {
  std::string s = j.dump();
  return s.size() > 200 ? s.substr(0, 200) + "..." : s;
}

// Field accessors that never throw: a missing or mistyped field reads as
// the fallback.
std::string StringField(const Json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}
bool BoolField(const Json& j, const char* key) {
  if (!j.is_object()) return false;
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}
int64_t IntField(const Json& j, const char* key) {
  if (!j.is_object()) return -1;
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

// model.vocab ({text: id}) plus added_tokens ([{id, content, special}]).
absl::Status ReadVocab(const Json& vocab, const Json& added, VocabSpec* spec) {
  if (!vocab.is_object()) {
    return absl::InvalidArgumentError(
        "tokenizer.json model.vocab is not an object");
  }
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json vocab entry '", it.key(), "' has id ",
                       Dump(it.value())));
    }
    max_id = std::max<int64_t>(max_id, it.value().get<int64_t>());
  }
  if (added.is_array()) {
    for (const Json& a : added) max_id = std::max(max_id, IntField(a, "id"));
  }
  if (max_id < 0 || max_id >= (1 << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json has token ids up to ", max_id));
  }
  spec->tokens.assign(max_id + 1, "");
  spec->types.assign(max_id + 1, TokenType::kUnused);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    spec->tokens[id] = it.key();
    spec->types[id] = TokenType::kNormal;
  }
  if (added.is_array()) {
    for (const Json& a : added) {
      const int64_t id = IntField(a, "id");
      if (id < 0) continue;
      spec->tokens[id] = StringField(a, "content");
      spec->types[id] = BoolField(a, "special") ? TokenType::kControl
                                                : TokenType::kUserDefined;
    }
  }
  return absl::OkStatus();
}

// model.merges: ["a b", ...] or [["a", "b"], ...].
absl::Status ReadMerges(const Json& merges, VocabSpec* spec) {
  if (!merges.is_array()) {
    return absl::InvalidArgumentError(
        "tokenizer.json model.merges is not an array");
  }
  spec->merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("merge ", i, " ('", s, "') has no space separator"));
      }
      spec->merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() &&
               m[1].is_string()) {
      spec->merges.emplace_back(m[0].get<std::string>(),
                                m[1].get<std::string>());
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("merge ", i, " is malformed: ", Dump(m)));
    }
  }
  return absl::OkStatus();
}

bool IsByteLevel(const Json& j, bool use_regex) {
  if (StringField(j, "type") != "ByteLevel") return false;
  auto it = j.find("use_regex");
  const bool regex = it == j.end() || !it->is_boolean() || it->get<bool>();
  return regex == use_regex && !BoolField(j, "add_prefix_space");
}

// Recognises the pre-tokenizers we implement; Unimplemented otherwise.
absl::StatusOr<PreTokenizerKind> PreTokenizerOf(const Json& pre) {
  if (IsByteLevel(pre, true)) return PreTokenizerKind::kGpt2;
  if (StringField(pre, "type") == "Sequence" && pre.contains("pretokenizers") &&
      pre["pretokenizers"].is_array() && pre["pretokenizers"].size() == 2) {
    const Json& a = pre["pretokenizers"][0];
    const Json& b = pre["pretokenizers"][1];
    if (StringField(a, "type") == "Digits" &&
        BoolField(a, "individual_digits") && IsByteLevel(b, true)) {
      return PreTokenizerKind::kSmolLM;
    }
    if (StringField(a, "type") == "Split" && IsByteLevel(b, false) &&
        StringField(a, "behavior") == "Isolated" && !BoolField(a, "invert") &&
        a.contains("pattern")) {
      const std::string regex = StringField(a["pattern"], "Regex");
      for (PreTokenizerKind k :
           {PreTokenizerKind::kLlama3, PreTokenizerKind::kQwen2,
            PreTokenizerKind::kQwen35, PreTokenizerKind::kGpt2}) {
        if (regex == PreTokenizerRegex(k)) return k;
      }
      return absl::UnimplementedError(
          absl::StrCat("unsupported pre-tokenizer regex ", regex));
    }
  }
  return absl::UnimplementedError(
      absl::StrCat("unsupported pre_tokenizer ", Dump(pre)));
}

// A token given as "text" or {"content": "text", ...}.
std::string TokenText(const Json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) {
    return j["content"].get<std::string>();
  }
  return "";
}

// Byte-level BPE: optional NFC normaliser and a known pre-tokenizer.
absl::Status ConfigureByteLevel(Json& doc, VocabSpec* spec) {
  spec->model = VocabModel::kByteLevelBpe;
  const Json& norm = doc["normalizer"];
  if (norm.is_object() && StringField(norm, "type") == "NFC") {
    spec->nfc = true;
  } else if (!norm.is_null()) {
    return absl::UnimplementedError(
        absl::StrCat("unsupported normalizer ", Dump(norm)));
  }
  auto pre = PreTokenizerOf(doc["pre_tokenizer"]);
  if (!pre.ok()) return pre.status();
  spec->pre = *pre;
  return absl::OkStatus();
}

bool IsSpaceReplace(const Json& j) {
  return StringField(j, "type") == "Replace" && j.contains("pattern") &&
         StringField(j["pattern"], "String") == " " &&
         StringField(j, "content") == "\xE2\x96\x81";
}

// SentencePiece-style BPE with byte fallback (Llama-2, Mistral, TinyLlama):
// either the legacy normaliser Sequence[Prepend("▁"), Replace(" ", "▁")] or
// a Metaspace pre-tokenizer (replacement "▁", split false).
absl::Status ConfigureSentencePiece(Json& doc, VocabSpec* spec) {
  spec->model = VocabModel::kSentencePiece;
  const Json& norm = doc["normalizer"];
  const Json& pre = doc["pre_tokenizer"];
  if (StringField(norm, "type") == "Sequence" && norm.contains("normalizers") &&
      norm["normalizers"].is_array() && pre.is_null()) {
    bool prepend = false, replace = false;
    for (const Json& n : norm["normalizers"]) {
      if (StringField(n, "type") == "Prepend" &&
          StringField(n, "prepend") == "\xE2\x96\x81") {
        prepend = true;
      } else if (IsSpaceReplace(n)) {
        replace = true;
      } else {
        return absl::UnimplementedError(
            absl::StrCat("unsupported normalizer step ", Dump(n)));
      }
    }
    if (!replace) {
      return absl::UnimplementedError(
          "SentencePiece normalizer lacks ' ' -> '▁'");
    }
    spec->add_space_prefix = prepend;
    return absl::OkStatus();
  }
  if (norm.is_null() && StringField(pre, "type") == "Metaspace" &&
      StringField(pre, "replacement") == "\xE2\x96\x81" &&
      !BoolField(pre, "split")) {
    std::string scheme = StringField(pre, "prepend_scheme");
    if (scheme.empty())
      scheme = BoolField(pre, "add_prefix_space") ? "always" : "never";
    if (scheme != "first" && scheme != "always" && scheme != "never") {
      return absl::UnimplementedError(
          absl::StrCat("unsupported Metaspace prepend_scheme '", scheme, "'"));
    }
    spec->add_space_prefix = scheme != "never";
    spec->space_prefix_after_special = scheme == "always";
    spec->space_prefix_unless_space = true;
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat(
      "unsupported SentencePiece-style tokenizer.json: normalizer ", Dump(norm),
      ", pre_tokenizer ", Dump(pre)));
}

// Merge priorities as SentencePiece scores: the piece made by merge r
// scores -r (its first merge); pieces no merge makes are never merged into.
void ScoresFromMerges(VocabSpec* spec) {
  absl::flat_hash_map<std::string, int32_t> ids;
  for (size_t id = 0; id < spec->tokens.size(); ++id) {
    if (spec->types[id] == TokenType::kNormal) {
      ids.emplace(spec->tokens[id], static_cast<int32_t>(id));
    }
  }
  spec->scores.assign(spec->tokens.size(),
                      -std::numeric_limits<float>::infinity());
  for (size_t r = 0; r < spec->merges.size(); ++r) {
    auto it = ids.find(spec->merges[r].first + spec->merges[r].second);
    if (it != ids.end() &&
        spec->scores[it->second] == -std::numeric_limits<float>::infinity()) {
      spec->scores[it->second] = -static_cast<float>(r);
    }
  }
}

// A post_processor (TemplateProcessing, alone or in a Sequence) whose
// single-sequence template starts with a special token prepends BOS.
void ApplyPostProcessor(const Json& post, VocabSpec* spec) {
  const Json* tp = nullptr;
  if (StringField(post, "type") == "TemplateProcessing") {
    tp = &post;
  } else if (StringField(post, "type") == "Sequence" &&
             post.contains("processors") && post["processors"].is_array()) {
    for (const Json& p : post["processors"]) {
      if (StringField(p, "type") == "TemplateProcessing") tp = &p;
    }
  }
  if (tp == nullptr || !tp->contains("single") || !(*tp)["single"].is_array() ||
      (*tp)["single"].empty()) {
    return;
  }
  const Json& first = (*tp)["single"][0];
  if (!first.is_object() || !first.contains("SpecialToken")) return;
  const std::string text = StringField(first["SpecialToken"], "id");
  for (size_t id = 0; id < spec->tokens.size(); ++id) {
    if (!text.empty() && spec->tokens[id] == text &&
        spec->types[id] != TokenType::kNormal) {
      spec->bos = static_cast<int32_t>(id);
      spec->add_bos = true;
      return;
    }
  }
}

void ApplyConfig(const Json& cfg, VocabSpec* spec) {
  if (cfg.contains("chat_template")) {
    const Json& t = cfg["chat_template"];
    if (t.is_string()) {
      spec->chat_template = t.get<std::string>();
    } else if (t.is_array()) {  // [{"name": "default", "template": "..."}]
      for (const Json& e : t) {
        if (StringField(e, "name") == "default") {
          spec->chat_template = StringField(e, "template");
        }
      }
    }
  }
  auto find = [&](const std::string& text) -> int32_t {
    if (text.empty()) return -1;
    for (size_t id = 0; id < spec->tokens.size(); ++id) {
      if (spec->tokens[id] == text && spec->types[id] != TokenType::kNormal) {
        return static_cast<int32_t>(id);
      }
    }
    return -1;
  };
  if (cfg.contains("bos_token")) spec->bos = find(TokenText(cfg["bos_token"]));
  if (cfg.contains("eos_token")) spec->eos = find(TokenText(cfg["eos_token"]));
  if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) {
    spec->add_bos = cfg["add_bos_token"].get<bool>();
  }
}

}  // namespace

absl::StatusOr<VocabSpec> VocabFromHfJson(std::string_view tokenizer_json,
                                          std::string_view config_json) {
  Json doc = Json::parse(tokenizer_json.begin(), tokenizer_json.end(), nullptr,
                         /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError("tokenizer.json is not a JSON object");
  }
  Json& model = doc["model"];
  if (!model.is_object() || StringField(model, "type") != "BPE") {
    return absl::UnimplementedError(
        absl::StrCat("tokenizer.json model type '", StringField(model, "type"),
                     "' is not supported (supported: BPE)"));
  }
  VocabSpec spec;
  const bool spm = BoolField(model, "byte_fallback");
  if (absl::Status s = spm ? ConfigureSentencePiece(doc, &spec)
                           : ConfigureByteLevel(doc, &spec);
      !s.ok()) {
    return s;
  }
  spec.ignore_merges = BoolField(model, "ignore_merges");
  if (absl::Status s = ReadVocab(model["vocab"], doc["added_tokens"], &spec);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadMerges(model["merges"], &spec); !s.ok()) return s;
  if (spm) {
    ScoresFromMerges(&spec);
    const std::string unk = StringField(model, "unk_token");
    for (size_t id = 0; id < spec.tokens.size() && !unk.empty(); ++id) {
      if (spec.tokens[id] == unk) {
        spec.unk = static_cast<int32_t>(id);
        spec.types[id] = TokenType::kUnknown;
        break;
      }
    }
  }
  ApplyPostProcessor(doc["post_processor"], &spec);
  if (!config_json.empty()) {
    Json cfg =
        Json::parse(config_json.begin(), config_json.end(), nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) {
      return absl::InvalidArgumentError(
          "tokenizer_config.json is not a JSON object");
    }
    ApplyConfig(cfg, &spec);
  }
  return spec;
}

absl::StatusOr<VocabSpec> VocabFromLlama2c(std::string_view bytes) {
  VocabSpec spec;
  spec.model = VocabModel::kSentencePiece;
  if (bytes.size() < 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama2.c tokenizer of ", bytes.size(), " bytes has no header"));
  }
  int32_t max_len;
  std::memcpy(&max_len, bytes.data(), 4);
  if (max_len <= 0 || max_len > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama2.c tokenizer max_token_length ", max_len, " is invalid"));
  }
  size_t pos = 4;
  while (pos < bytes.size()) {
    if (bytes.size() - pos < 8) {
      return absl::InvalidArgumentError(
          absl::StrCat("llama2.c tokenizer truncated at byte offset ", pos,
                       " (token ", spec.tokens.size(), ")"));
    }
    float score;
    int32_t len;
    std::memcpy(&score, bytes.data() + pos, 4);
    std::memcpy(&len, bytes.data() + pos + 4, 4);
    pos += 8;
    if (len < 0 || len > max_len ||
        static_cast<size_t>(len) > bytes.size() - pos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "llama2.c token ", spec.tokens.size(), " at byte offset ", pos - 4,
          " has length ", len, " (max ", max_len, ", ", bytes.size() - pos,
          " bytes left)"));
    }
    std::string piece(bytes.substr(pos, len));
    pos += len;
    TokenType type = TokenType::kNormal;
    const size_t id = spec.tokens.size();
    if (piece == "\n<s>\n") {
      piece = "<s>";
      type = TokenType::kControl;
      spec.bos = static_cast<int32_t>(id);
    } else if (piece == "\n</s>\n") {
      piece = "</s>";
      type = TokenType::kControl;
      spec.eos = static_cast<int32_t>(id);
    } else if (piece == "<unk>") {
      type = TokenType::kUnknown;
      spec.unk = static_cast<int32_t>(id);
    } else {
      // llama2.c stores SentencePiece's "▁" as a plain space.
      std::string marked;
      for (char c : piece) {
        if (c == ' ')
          marked += "\xE2\x96\x81";
        else
          marked.push_back(c);
      }
      piece = std::move(marked);
    }
    spec.tokens.push_back(std::move(piece));
    spec.types.push_back(type);
    spec.scores.push_back(score);
  }
  if (spec.tokens.empty()) {
    return absl::InvalidArgumentError("llama2.c tokenizer holds no tokens");
  }
  spec.add_bos = true;
  spec.add_space_prefix = true;
  return spec;
}

}  // namespace pdserve
