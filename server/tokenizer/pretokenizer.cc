#include "server/tokenizer/pretokenizer.h"

#include "absl/strings/str_cat.h"
#include "server/tokenizer/unicode.h"

namespace pdserve {
namespace {

using unicode::kLetter;
using unicode::kMark;
using unicode::kNumber;
using unicode::kSpace;

// Code points of the text with their classes and byte offsets.
struct Decoded {
  std::vector<uint32_t> cp;
  std::vector<uint8_t> fl;
  std::vector<uint32_t> off;  // size cp.size() + 1
};

// Classes of ASCII characters (the common case), from the same tables.
struct AsciiFlags {
  uint8_t f[128];
  AsciiFlags() {
    for (int i = 0; i < 128; ++i) f[i] = unicode::Flags(i);
  }
};

void Decode(std::string_view text, Decoded* d) {
  static const AsciiFlags ascii;
  d->cp.clear();
  d->fl.clear();
  d->off.clear();
  d->cp.reserve(text.size());
  d->fl.reserve(text.size());
  d->off.reserve(text.size() + 1);
  size_t i = 0;
  while (i < text.size()) {
    d->off.push_back(static_cast<uint32_t>(i));
    const uint8_t b = static_cast<uint8_t>(text[i]);
    if (b < 0x80) {
      d->cp.push_back(b);
      d->fl.push_back(ascii.f[b]);
      ++i;
      continue;
    }
    uint32_t cp;
    i += unicode::DecodeValid(text.data() + i, &cp);
    d->cp.push_back(cp);
    d->fl.push_back(unicode::Flags(cp));
  }
  d->off.push_back(static_cast<uint32_t>(text.size()));
}

// Matches over code points [.., n) of one segment. With `marks_are_letters`
// (Qwen3.5) the letter class is [\p{L}\p{M}] wherever the regex says \p{L}+
// or excludes \p{L} from a punctuation run; the optional one-character
// prefix [^\r\n\p{L}\p{N}] of a letter run needs no change: a mark there is
// part of the run either way.
class Matcher {
 public:
  Matcher(const Decoded& d, size_t n, bool marks_are_letters)
      : cp_(d.cp.data()),
        fl_(d.fl.data()),
        n_(n),
        letter_(marks_are_letters ? kLetter | kMark : kLetter) {}

  // \p{L}, or [\p{L}\p{M}] when marks count as letters.
  bool L(size_t i) const { return i < n_ && (fl_[i] & letter_); }
  bool N(size_t i) const { return i < n_ && (fl_[i] & kNumber); }
  bool S(size_t i) const { return i < n_ && (fl_[i] & kSpace); }
  // [^\s\p{L}\p{N}] (or [^\s\p{L}\p{M}\p{N}])
  bool Other(size_t i) const {
    return i < n_ && !(fl_[i] & (letter_ | kNumber | kSpace));
  }
  bool CrLf(size_t i) const {
    return i < n_ && (cp_[i] == '\r' || cp_[i] == '\n');
  }

  size_t RunL(size_t i) const {
    while (L(i)) ++i;
    return i;
  }
  size_t RunN(size_t i) const {
    while (N(i)) ++i;
    return i;
  }
  size_t RunOther(size_t i) const {
    while (Other(i)) ++i;
    return i;
  }
  size_t RunS(size_t i) const {
    while (S(i)) ++i;
    return i;
  }

  // 's|'t|'re|'ve|'m|'ll|'d, case-insensitive when `fold` (as Oniguruma's
  // (?i:...): ASCII case plus U+017F long s, the only other code point whose
  // case folding is one of these letters): the end, or 0 for no match.
  size_t Contraction(size_t i, bool fold) const {
    if (cp_[i] != '\'' || i + 1 >= n_) return 0;
    const auto c = [&](size_t k) -> uint32_t {
      if (k >= n_) return 0;
      const uint32_t v = cp_[k];
      if (!fold) return v;
      if (v == 0x17F) return 's';  // LATIN SMALL LETTER LONG S folds to s
      return v >= 'A' && v <= 'Z' ? v + 32 : v;
    };
    const uint32_t a = c(i + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    const uint32_t b = c(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') ||
        (a == 'l' && b == 'l')) {
      return i + 3;
    }
    return 0;
  }

  // \s+(?!\S)|\s+ at a whitespace character i.
  size_t TrailingSpace(size_t i) const {
    const size_t k = RunS(i);
    if (k == n_ || k - 1 == i) return k;
    return k - 1;
  }

  size_t Gpt2(size_t i) const {
    if (size_t e = Contraction(i, false)) return e;
    const size_t j = cp_[i] == ' ' ? i + 1 : i;
    if (L(j)) return RunL(j);
    if (N(j)) return RunN(j);
    if (Other(j)) return RunOther(j);
    if (S(i)) return TrailingSpace(i);
    return i + 1;
  }

  size_t Llama3(size_t i, size_t max_digits) const {
    if (size_t e = Contraction(i, true)) return e;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (L(i)) return RunL(i);
    if (!N(i) && !CrLf(i) && L(i + 1)) return RunL(i + 1);
    // \p{N}{1,max}
    if (N(i)) {
      size_t e = i;
      while (e - i < max_digits && N(e)) ++e;
      return e;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    const size_t j = cp_[i] == ' ' && Other(i + 1) ? i + 1 : i;
    if (Other(j)) {
      size_t e = RunOther(j);
      while (CrLf(e)) ++e;
      return e;
    }
    if (S(i)) {
      // \s*[\r\n]+ : up to the last CR/LF of the whitespace run.
      const size_t k = RunS(i);
      for (size_t p = k; p > i; --p) {
        if (CrLf(p - 1)) return p;
      }
      return TrailingSpace(i);
    }
    return i + 1;
  }

 private:
  const uint32_t* cp_;
  const uint8_t* fl_;
  size_t n_;
  uint8_t letter_;  // class bits that make a letter
};

void SplitRange(PreTokenizerKind kind, const Decoded& d, size_t begin,
                size_t end, std::vector<Piece>* pieces) {
  const Matcher m(d, end, kind == PreTokenizerKind::kQwen35);
  size_t i = begin;
  while (i < end) {
    size_t e;
    switch (kind) {
      case PreTokenizerKind::kLlama3:
        e = m.Llama3(i, 3);
        break;
      case PreTokenizerKind::kQwen2:
      case PreTokenizerKind::kQwen35:
        e = m.Llama3(i, 1);
        break;
      default:
        e = m.Gpt2(i);
        break;
    }
    pieces->push_back({d.off[i], d.off[e]});
    i = e;
  }
}

}  // namespace

absl::StatusOr<PreTokenizerKind> PreTokenizerFromGgufName(
    std::string_view name) {
  if (name == "gpt-2" || name == "gpt2" || name == "default" || name == "mpt" ||
      name == "olmo" || name == "jais") {
    return PreTokenizerKind::kGpt2;
  }
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3" ||
      name == "dbrx" || name == "smaug-bpe") {
    return PreTokenizerKind::kLlama3;
  }
  if (name == "qwen2" || name == "stablelm2" || name == "deepseek-r1-qwen") {
    return PreTokenizerKind::kQwen2;
  }
  if (name == "qwen35") return PreTokenizerKind::kQwen35;
  if (name == "smollm" || name == "starcoder" || name == "refact" ||
      name == "codeshell") {
    return PreTokenizerKind::kSmolLM;
  }
  return absl::NotFoundError(
      absl::StrCat("unsupported pre-tokenizer '", std::string(name),
                   "' (supported: gpt-2, default, llama-bpe, llama3, qwen2, "
                   "qwen35, smollm)"));
}

std::string_view PreTokenizerRegex(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::kLlama3:
      return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
             "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
             "\\s+(?!\\S)|\\s+";
    case PreTokenizerKind::kQwen2:
      return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
             "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
             "\\s+(?!\\S)|\\s+";
    case PreTokenizerKind::kQwen35:
      return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|"
             "[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}|"
             " ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
             "\\s+(?!\\S)|\\s+";
    default:
      return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
             "?[^\\s\\p{L}\\p{N}]+|"
             "\\s+(?!\\S)|\\s+";
  }
}

const char* PreTokenizerName(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::kGpt2:
      return "gpt-2";
    case PreTokenizerKind::kLlama3:
      return "llama-bpe";
    case PreTokenizerKind::kQwen2:
      return "qwen2";
    case PreTokenizerKind::kQwen35:
      return "qwen35";
    case PreTokenizerKind::kSmolLM:
      return "smollm";
  }
  return "?";
}

void PreTokenize(PreTokenizerKind kind, std::string_view text,
                 std::vector<Piece>* pieces) {
  thread_local Decoded d;
  Decode(text, &d);
  const size_t n = d.cp.size();
  if (kind != PreTokenizerKind::kSmolLM) {
    SplitRange(kind, d, 0, n, pieces);
    return;
  }
  size_t start = 0;
  for (size_t i = 0; i < n; ++i) {
    if (d.fl[i] & kNumber) {
      SplitRange(PreTokenizerKind::kGpt2, d, start, i, pieces);
      pieces->push_back({d.off[i], d.off[i + 1]});
      start = i + 1;
    }
  }
  SplitRange(PreTokenizerKind::kGpt2, d, start, n, pieces);
}

}  // namespace pdserve
