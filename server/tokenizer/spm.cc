#include "server/tokenizer/spm.h"

#include <array>
#include <limits>
#include <queue>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "server/tokenizer/unicode.h"
#include "server/tokenizer/vocab.h"

namespace pdserve {
namespace {

constexpr char kSpaceMark[] = "\xE2\x96\x81";  // U+2581 "▁"

// The byte of a "<0xNN>" piece, or -1.
int ParseBytePiece(std::string_view s) {
  if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return -1;
  int v = 0;
  for (char c : s.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if (c >= 'A' && c <= 'F')
      v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      v |= c - 'a' + 10;
    else
      return -1;
  }
  return v;
}

class SentencePieceBpe : public VocabTokenizer {
 public:
  SentencePieceBpe(const VocabSpec& spec, std::vector<std::string> token_bytes)
      : VocabTokenizer(spec, std::move(token_bytes)),
        scores_(spec.scores),
        unk_(spec.unk),
        add_space_prefix_(spec.add_space_prefix),
        prefix_after_special_(spec.space_prefix_after_special),
        prefix_unless_space_(spec.space_prefix_unless_space) {
    byte_ids_.fill(-1);
    for (size_t id = 0; id < spec.tokens.size(); ++id) {
      const TokenType t = spec.types[id];
      const int byte = ParseBytePiece(spec.tokens[id]);
      if (byte >= 0 && (t == TokenType::kByte || t == TokenType::kNormal ||
                        t == TokenType::kUndefined)) {
        if (byte_ids_[byte] < 0) byte_ids_[byte] = static_cast<int32_t>(id);
        continue;
      }
      if (t == TokenType::kNormal || t == TokenType::kUserDefined ||
          t == TokenType::kUndefined) {
        pieces_.emplace(spec.tokens[id], static_cast<int32_t>(id));
      }
    }
  }

 protected:
  void EncodeSegment(std::string_view text, bool at_start, bool after_special,
                     std::vector<int32_t>* out) const override;

 private:
  int32_t PieceId(std::string_view s) const {
    auto it = pieces_.find(absl::string_view(s.data(), s.size()));
    return it == pieces_.end() ? -1 : it->second;
  }

  std::vector<float> scores_;
  int32_t unk_;
  bool add_space_prefix_;
  bool prefix_after_special_;
  bool prefix_unless_space_;
  std::array<int32_t, 256> byte_ids_;
  absl::flat_hash_map<std::string, int32_t> pieces_;
};

void SentencePieceBpe::EncodeSegment(std::string_view text, bool at_start,
                                     bool after_special,
                                     std::vector<int32_t>* out) const {
  std::string norm;
  norm.reserve(text.size() * 2 + 3);
  const bool starts_with_space =
      !text.empty() && (text[0] == ' ' || text.substr(0, 3) == kSpaceMark);
  if (add_space_prefix_ &&
      (at_start || (after_special && prefix_after_special_)) &&
      !(prefix_unless_space_ && starts_with_space)) {
    norm += kSpaceMark;
  }
  for (char c : text) {
    if (c == ' ') {
      norm += kSpaceMark;
    } else {
      norm.push_back(c);
    }
  }
  // Symbols: one per character, as a doubly linked list of byte spans.
  struct Sym {
    int prev, next;
    uint32_t begin, len;
  };
  std::vector<Sym> syms;
  syms.reserve(norm.size());
  for (size_t i = 0; i < norm.size();) {
    uint32_t cp;
    const int len = unicode::DecodeValid(norm.data() + i, &cp);
    const int idx = static_cast<int>(syms.size());
    syms.push_back({idx - 1, idx + 1, static_cast<uint32_t>(i),
                    static_cast<uint32_t>(len)});
    i += len;
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  // Highest score first; ties: leftmost first.
  struct Bigram {
    float score;
    int left, right;
    uint32_t size;
    bool operator<(const Bigram& o) const {
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Bigram> queue;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const std::string_view s(norm.data() + syms[l].begin,
                             syms[l].len + syms[r].len);
    const int32_t id = PieceId(s);
    if (id < 0 || static_cast<size_t>(id) >= scores_.size() ||
        scores_[id] == -std::numeric_limits<float>::infinity()) {
      return;  // not a piece any merge produces
    }
    queue.push({scores_[id], l, r, static_cast<uint32_t>(s.size())});
  };
  for (size_t i = 1; i < syms.size(); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Sym& l = syms[b.left];
    Sym& r = syms[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.size) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int i = 0; i >= 0; i = syms[i].next) {
    const std::string_view s(norm.data() + syms[i].begin, syms[i].len);
    const int32_t id = PieceId(s);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (char c : s) {  // byte fallback
      const int32_t b = byte_ids_[static_cast<uint8_t>(c)];
      if (b >= 0) {
        out->push_back(b);
      } else if (unk_ >= 0) {
        out->push_back(unk_);
      }
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> BuildSentencePieceTokenizer(
    VocabSpec spec) {
  const size_t n = spec.tokens.size();
  if (spec.scores.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("SentencePiece vocabulary has ", n, " tokens but ",
                     spec.scores.size(), " scores"));
  }
  std::vector<std::string> bytes(n);
  for (size_t id = 0; id < n; ++id) {
    const int byte = ParseBytePiece(spec.tokens[id]);
    if (byte >= 0 && spec.types[id] != TokenType::kControl &&
        spec.types[id] != TokenType::kUserDefined) {
      spec.types[id] = TokenType::kByte;
      bytes[id] = std::string(1, static_cast<char>(byte));
    } else if (spec.types[id] == TokenType::kControl ||
               spec.types[id] == TokenType::kUnknown) {
      bytes[id] = spec.tokens[id];
    } else {
      bytes[id] = absl::StrReplaceAll(spec.tokens[id], {{kSpaceMark, " "}});
    }
  }
  return std::unique_ptr<Tokenizer>(
      new SentencePieceBpe(spec, std::move(bytes)));
}

}  // namespace pdserve
