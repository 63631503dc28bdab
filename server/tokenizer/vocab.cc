#include "server/tokenizer/vocab.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/tokenizer/bpe.h"
#include "server/tokenizer/spm.h"
#include "server/tokenizer/unicode.h"

namespace pdserve {
namespace {

constexpr std::string_view kEndOfTurnTexts[] = {
    "<|im_end|>", "<|eot_id|>",    "<|eom_id|>",      "<|endoftext|>",
    "<|end|>",    "<end_of_turn>", "<|end_of_text|>",
};

// Key of the first one or two bytes of text[pos..] (see specials_by_prefix_).
uint32_t PrefixKey(std::string_view text, size_t pos) {
  const uint32_t b0 = static_cast<uint8_t>(text[pos]);
  return pos + 1 < text.size() ? b0 << 8 | static_cast<uint8_t>(text[pos + 1])
                               : b0 << 8 | 0x100;
}

bool IsSpecialType(TokenType t) {
  return t == TokenType::kControl || t == TokenType::kUserDefined ||
         t == TokenType::kUnknown;
}

}  // namespace

std::string Tokenizer::Decode(absl::Span<const int32_t> ids,
                              bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (skip_special && IsSpecial(id)) continue;
    out += TokenBytes(id);
  }
  return out;
}

VocabTokenizer::VocabTokenizer(const VocabSpec& spec,
                               std::vector<std::string> token_bytes)
    : token_bytes_(std::move(token_bytes)),
      types_(spec.types),
      bos_(spec.bos),
      eos_(spec.eos),
      add_bos_(spec.add_bos),
      add_space_prefix_(spec.add_space_prefix),
      chat_template_(spec.chat_template) {
  bytes_to_id_.reserve(token_bytes_.size());
  for (size_t id = 0; id < token_bytes_.size(); ++id) {
    const bool special = IsSpecialType(types_[id]);
    // Special tokens are found by their text; for normal tokens the first
    // id with given bytes wins.
    auto [it, inserted] = bytes_to_id_.emplace(token_bytes_[id], id);
    if (!inserted && special && !IsSpecialType(types_[it->second])) {
      it->second = static_cast<int32_t>(id);
    }
    if (special && !token_bytes_[id].empty()) {
      const std::string& t = token_bytes_[id];
      special_first_byte_[static_cast<uint8_t>(t[0])] = true;
      specials_by_prefix_[PrefixKey(t, 0)].push_back(static_cast<int32_t>(id));
    }
  }
  for (auto& [key, list] : specials_by_prefix_) {
    std::stable_sort(list.begin(), list.end(), [&](int32_t a, int32_t b) {
      return token_bytes_[a].size() > token_bytes_[b].size();
    });
  }
  const int32_t n = vocab_size();
  for (int32_t id : {spec.eos, spec.eot, spec.eom}) {
    if (id >= 0 && id < n) stop_ids_.push_back(id);
  }
  for (std::string_view text : kEndOfTurnTexts) {
    auto it = bytes_to_id_.find(std::string(text));
    if (it != bytes_to_id_.end() && IsSpecialType(types_[it->second])) {
      stop_ids_.push_back(it->second);
    }
  }
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()),
                  stop_ids_.end());
}

int32_t VocabTokenizer::MatchSpecial(std::string_view text, size_t pos) const {
  // Two-byte prefixes first (they hold the longer texts), then one byte.
  for (const uint32_t key :
       {PrefixKey(text, pos), PrefixKey(text.substr(pos, 1), 0)}) {
    auto it = specials_by_prefix_.find(key);
    if (it == specials_by_prefix_.end()) continue;
    for (int32_t id : it->second) {
      const std::string& s = token_bytes_[id];
      if (text.size() - pos >= s.size() &&
          text.compare(pos, s.size(), s) == 0) {
        return id;
      }
    }
  }
  return -1;
}

absl::StatusOr<std::vector<int32_t>> VocabTokenizer::Encode(
    std::string_view text, bool parse_special) const {
  if (text.size() >= (size_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "text of ", text.size(), " bytes exceeds the 4 GiB encode limit"));
  }
  if (absl::Status s = unicode::ValidateUtf8(text); !s.ok()) return s;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (!parse_special) {
    if (!text.empty()) EncodeSegment(text, /*at_start=*/true, false, &out);
    return out;
  }
  size_t start = 0;
  bool after_special = false;
  for (size_t pos = 0; pos < text.size();) {
    const int32_t id = special_first_byte_[static_cast<uint8_t>(text[pos])]
                           ? MatchSpecial(text, pos)
                           : -1;
    if (id < 0) {
      ++pos;
      continue;
    }
    if (pos > start) {
      EncodeSegment(text.substr(start, pos - start), start == 0, after_special,
                    &out);
    }
    out.push_back(id);
    after_special = true;
    pos += token_bytes_[id].size();
    start = pos;
  }
  if (start < text.size()) {
    EncodeSegment(text.substr(start), start == 0, after_special, &out);
  }
  return out;
}

std::string VocabTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return token_bytes_[id];
}

std::string VocabTokenizer::Decode(absl::Span<const int32_t> ids,
                                   bool skip_special) const {
  std::string out;
  bool first_text = add_space_prefix_;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    const bool special = IsSpecialType(types_[id]);
    if (skip_special && special) continue;
    std::string_view bytes = token_bytes_[id];
    if (first_text && !special) {
      if (!bytes.empty() && bytes[0] == ' ') bytes.remove_prefix(1);
      first_text = false;
    }
    out.append(bytes.data(), bytes.size());
  }
  return out;
}

bool VocabTokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && IsSpecialType(types_[id]);
}

int32_t VocabTokenizer::FindToken(std::string_view text) const {
  auto it = bytes_to_id_.find(std::string(text));
  return it == bytes_to_id_.end() ? -1 : it->second;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> BuildTokenizer(VocabSpec spec) {
  const size_t n = spec.tokens.size();
  if (n == 0) return absl::InvalidArgumentError("vocabulary has no tokens");
  if (n > (1u << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocabulary of ", n, " tokens is too large"));
  }
  if (spec.types.empty()) spec.types.assign(n, TokenType::kNormal);
  if (spec.types.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocabulary has ", n, " tokens but ", spec.types.size(),
                     " token types"));
  }
  for (int32_t* id : {&spec.bos, &spec.eos, &spec.unk, &spec.eot, &spec.eom}) {
    if (*id >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "special token id ", *id, " is outside the vocabulary of ", n));
    }
  }
  if (spec.model == VocabModel::kSentencePiece) {
    return BuildSentencePieceTokenizer(std::move(spec));
  }
  return BuildByteLevelBpeTokenizer(std::move(spec));
}

}  // namespace pdserve
