#include "server/chat/jinja/lexer.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/chat/jinja/text.h"

namespace pdserve::jinja {
namespace {

bool IsNameStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }
bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
         c == '\v';
}

// Python str.rstrip() / "all whitespace" over UTF-8.
std::string RStripPython(absl::string_view s) {
  return PyStrip(s, std::nullopt, /*left=*/false, /*right=*/true);
}
bool AllPythonSpace(absl::string_view s) {
  for (char32_t cp : DecodeUtf8(s)) {
    if (!IsPythonSpace(cp)) return false;
  }
  return !s.empty();
}
// Skips Python \s* (regex whitespace) from pos.
size_t SkipRegexSpace(const std::string& s, size_t pos) {
  while (pos < s.size()) {
    if (IsAsciiSpace(s[pos]) || (s[pos] >= 0x1c && s[pos] <= 0x1f)) {
      ++pos;
      continue;
    }
    if (static_cast<unsigned char>(s[pos]) >= 0x80) {
      size_t len = 1;
      while (pos + len < s.size() &&
             (static_cast<unsigned char>(s[pos + len]) & 0xC0) == 0x80) {
        ++len;
      }
      std::vector<char32_t> cp = DecodeUtf8(absl::string_view(s).substr(pos, len));
      if (cp.size() == 1 && IsPythonSpace(cp[0])) {
        pos += len;
        continue;
      }
    }
    break;
  }
  return pos;
}

class Lexer {
 public:
  explicit Lexer(const std::string& src) : src_(src) {}

  absl::StatusOr<std::vector<Token>> Run();

 private:
  absl::Status Error(int offset, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template ", DescribeOffset(src_, offset), ": ", what));
  }
  void EmitData(std::string text, int offset) {
    if (!text.empty()) out_.push_back({Token::Type::kData, std::move(text), offset});
  }
  // Applies `{%-` / lstrip_blocks to the text before a tag.
  std::string StripBefore(absl::string_view text, char kind, char mod) const;
  // Matches a block end ("+%}", "-%}\s*", "%}\n?") at pos; returns the new
  // position or npos.
  size_t MatchBlockEnd(size_t pos, char close) const;
  absl::Status LexComment(size_t tag_pos, size_t pos);
  absl::Status LexRaw(size_t tag_pos, size_t pos);
  absl::Status LexTag(size_t tag_pos, size_t pos, bool block);
  absl::Status LexString(size_t* pos);
  absl::Status LexNumber(size_t* pos);

  const std::string& src_;
  std::vector<Token> out_;
  size_t pos_ = 0;
  bool line_starting_ = true;
};

std::string Lexer::StripBefore(absl::string_view text, char kind,
                               char mod) const {
  if (mod == '-') return RStripPython(text);
  if (mod == '+' || kind == '{') return std::string(text);
  size_t nl = text.rfind('\n');
  size_t l_pos = nl == absl::string_view::npos ? 0 : nl + 1;
  if ((l_pos > 0 || line_starting_) && AllPythonSpace(text.substr(l_pos))) {
    return std::string(text.substr(0, l_pos));
  }
  return std::string(text);
}

size_t Lexer::MatchBlockEnd(size_t pos, char close) const {
  auto at = [&](size_t p, absl::string_view s) {
    return src_.compare(p, s.size(), s.data(), s.size()) == 0;
  };
  std::string end = std::string(1, close) + "}";
  if (close != '}' && at(pos, "+" + end)) return pos + 3;
  if (at(pos, "-" + end)) return SkipRegexSpace(src_, pos + 3);
  if (at(pos, end)) {
    pos += 2;
    if (close != '}' && pos < src_.size() && src_[pos] == '\n') ++pos;
    return pos;
  }
  return std::string::npos;
}

absl::Status Lexer::LexComment(size_t tag_pos, size_t pos) {
  for (size_t q = pos; q < src_.size(); ++q) {
    size_t end = MatchBlockEnd(q, '#');
    if (end != std::string::npos) {
      pos_ = end;
      line_starting_ = src_[end - 1] == '\n';
      return absl::OkStatus();
    }
  }
  return Error(static_cast<int>(tag_pos), "missing end of comment tag '#}'");
}

absl::Status Lexer::LexRaw(size_t tag_pos, size_t pos) {
  // pos is just after "{% raw %}" (or "-%}\s*").
  for (size_t q = pos; q + 1 < src_.size(); ++q) {
    if (src_[q] != '{' || src_[q + 1] != '%') continue;
    size_t p = q + 2;
    char mod = (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ? src_[p] : 0;
    if (mod) ++p;
    p = SkipRegexSpace(src_, p);
    if (src_.compare(p, 6, "endraw") != 0) continue;
    p = SkipRegexSpace(src_, p + 6);
    size_t end = MatchBlockEnd(p, '%');
    if (end == std::string::npos) continue;
    EmitData(StripBefore(absl::string_view(src_).substr(pos, q - pos), '%', mod),
             static_cast<int>(pos));
    pos_ = end;
    line_starting_ = src_[end - 1] == '\n';
    return absl::OkStatus();
  }
  return Error(static_cast<int>(tag_pos), "missing '{% endraw %}'");
}

absl::Status Lexer::LexString(size_t* pos) {
  char quote = src_[*pos];
  size_t start = *pos;
  size_t p = *pos + 1;
  std::string raw;
  while (p < src_.size() && src_[p] != quote) {
    if (src_[p] == '\\' && p + 1 < src_.size()) {
      raw.push_back(src_[p++]);
    }
    raw.push_back(src_[p++]);
  }
  if (p >= src_.size()) {
    return Error(static_cast<int>(start), "unterminated string literal");
  }
  *pos = p + 1;
  // Python "unicode-escape" decoding, as jinja2 applies to literals.
  std::string value;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\' || i + 1 >= raw.size()) {
      value.push_back(raw[i]);
      continue;
    }
    char e = raw[++i];
    switch (e) {
      case '\n': break;
      case '\\': value.push_back('\\'); break;
      case '\'': value.push_back('\''); break;
      case '"': value.push_back('"'); break;
      case 'a': value.push_back('\a'); break;
      case 'b': value.push_back('\b'); break;
      case 'f': value.push_back('\f'); break;
      case 'n': value.push_back('\n'); break;
      case 'r': value.push_back('\r'); break;
      case 't': value.push_back('\t'); break;
      case 'v': value.push_back('\v'); break;
      case 'x': case 'u': case 'U': {
        size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        if (i + n >= raw.size()) {
          return Error(static_cast<int>(start), "truncated \\x/\\u escape");
        }
        uint32_t cp = 0;
        for (size_t k = 1; k <= n; ++k) {
          char h = i + k < raw.size() ? raw[i + k] : 'g';
          if (!absl::ascii_isxdigit(h)) {
            return Error(static_cast<int>(start), "malformed \\x/\\u escape");
          }
          cp = cp * 16 + (absl::ascii_isdigit(h) ? h - '0'
                                                 : absl::ascii_tolower(h) - 'a' + 10);
        }
        if (cp > 0x10FFFF) return Error(static_cast<int>(start), "escape out of range");
        AppendUtf8(cp, &value);
        i += n;
        break;
      }
      case 'N':
        return Error(static_cast<int>(start),
                     "unsupported construct: \\N{...} escape in string literal");
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = e - '0';
          for (int k = 0; k < 2 && i + 1 < raw.size() && raw[i + 1] >= '0' &&
                          raw[i + 1] <= '7'; ++k) {
            cp = cp * 8 + (raw[++i] - '0');
          }
          AppendUtf8(cp, &value);
        } else {
          value.push_back('\\');
          value.push_back(e);
        }
    }
  }
  out_.push_back({Token::Type::kString, std::move(value), static_cast<int>(start)});
  return absl::OkStatus();
}

absl::Status Lexer::LexNumber(size_t* pos) {
  size_t start = *pos, p = *pos;
  auto digits = [&](size_t q, auto pred) {
    size_t b = q;
    while (q < src_.size() && (pred(src_[q]) ||
                               (src_[q] == '_' && q > b && q + 1 < src_.size() &&
                                pred(src_[q + 1])))) {
      ++q;
    }
    return q;
  };
  auto dec = [](char c) { return absl::ascii_isdigit(c); };
  if (src_[p] == '0' && p + 1 < src_.size() &&
      (absl::ascii_tolower(src_[p + 1]) == 'x' ||
       absl::ascii_tolower(src_[p + 1]) == 'o' ||
       absl::ascii_tolower(src_[p + 1]) == 'b')) {
    char base_c = absl::ascii_tolower(src_[p + 1]);
    int base = base_c == 'x' ? 16 : base_c == 'o' ? 8 : 2;
    size_t q = p + 2;
    uint64_t v = 0;
    bool any = false;
    for (; q < src_.size(); ++q) {
      char c = absl::ascii_tolower(src_[q]);
      if (c == '_') continue;
      int d = absl::ascii_isdigit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : 99;
      if (d >= base) break;
      v = v * base + d;
      any = true;
      if (v > static_cast<uint64_t>(INT64_MAX)) {
        return Error(static_cast<int>(start), "integer literal out of range");
      }
    }
    if (!any) return Error(static_cast<int>(start), "malformed integer literal");
    out_.push_back({Token::Type::kInt, absl::StrCat(v), static_cast<int>(start)});
    *pos = q;
    return absl::OkStatus();
  }
  size_t q = digits(p, dec);
  bool is_float = false;
  bool after_dot = start > 0 && src_[start - 1] == '.';
  if (!after_dot && q + 1 < src_.size() && src_[q] == '.' && dec(src_[q + 1])) {
    q = digits(q + 1, dec);
    is_float = true;
  }
  if (!after_dot && q < src_.size() && absl::ascii_tolower(src_[q]) == 'e') {
    size_t r = q + 1;
    if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
    if (r < src_.size() && dec(src_[r])) {
      q = digits(r, dec);
      is_float = true;
    }
  }
  std::string text;
  for (size_t i = start; i < q; ++i) {
    if (src_[i] != '_') text.push_back(src_[i]);
  }
  if (!is_float && text.size() > 18) {
    return Error(static_cast<int>(start), "integer literal out of range");
  }
  out_.push_back({is_float ? Token::Type::kFloat : Token::Type::kInt, text,
                  static_cast<int>(start)});
  *pos = q;
  return absl::OkStatus();
}

absl::Status Lexer::LexTag(size_t tag_pos, size_t pos, bool block) {
  out_.push_back({block ? Token::Type::kBlockBegin : Token::Type::kVarBegin,
                  block ? "{%" : "{{", static_cast<int>(tag_pos)});
  std::vector<char> balance;
  static const char* kOps2[] = {"//", "**", "==", "!=", ">=", "<="};
  while (pos < src_.size()) {
    if (balance.empty()) {
      size_t end = MatchBlockEnd(pos, block ? '%' : '}');
      if (end != std::string::npos) {
        out_.push_back({block ? Token::Type::kBlockEnd : Token::Type::kVarEnd,
                        "", static_cast<int>(pos)});
        pos_ = end;
        line_starting_ = src_[end - 1] == '\n';
        return absl::OkStatus();
      }
    }
    char c = src_[pos];
    if (IsAsciiSpace(c)) {
      ++pos;
    } else if (c == '\'' || c == '"') {
      absl::Status s = LexString(&pos);
      if (!s.ok()) return s;
    } else if (absl::ascii_isdigit(c)) {
      absl::Status s = LexNumber(&pos);
      if (!s.ok()) return s;
    } else if (IsNameStart(c)) {
      size_t q = pos;
      while (q < src_.size() && IsNameChar(src_[q])) ++q;
      out_.push_back({Token::Type::kName, src_.substr(pos, q - pos),
                      static_cast<int>(pos)});
      pos = q;
    } else {
      std::string op;
      for (const char* o : kOps2) {
        if (src_.compare(pos, 2, o) == 0) op = o;
      }
      if (op.empty() && absl::string_view("+-/*%~[](){}><=.:|,;").find(c) !=
                            absl::string_view::npos) {
        op = std::string(1, c);
      }
      if (op.empty()) {
        return Error(static_cast<int>(pos),
                     absl::StrCat("unexpected character '", std::string(1, c), "'"));
      }
      if (op == "(" || op == "[" || op == "{") {
        balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (balance.empty() || balance.back() != op[0]) {
          return Error(static_cast<int>(pos), absl::StrCat("unexpected '", op, "'"));
        }
        balance.pop_back();
      }
      out_.push_back({Token::Type::kOp, op, static_cast<int>(pos)});
      pos += op.size();
    }
  }
  return Error(static_cast<int>(tag_pos),
               block ? "unclosed '{%' tag" : "unclosed '{{' tag");
}

absl::StatusOr<std::vector<Token>> Lexer::Run() {
  while (pos_ < src_.size()) {
    size_t t = pos_;
    while (true) {
      t = src_.find('{', t);
      if (t == std::string::npos || t + 1 >= src_.size()) {
        t = std::string::npos;
        break;
      }
      char k = src_[t + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++t;
    }
    if (t == std::string::npos) {
      EmitData(src_.substr(pos_), static_cast<int>(pos_));
      break;
    }
    char kind = src_[t + 1];
    size_t p = t + 2;
    char mod = (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ? src_[p] : 0;
    if (mod) ++p;
    // {% raw %} ... {% endraw %}
    bool raw = false;
    size_t raw_end = 0;
    if (kind == '%') {
      size_t q = SkipRegexSpace(src_, p);
      if (src_.compare(q, 3, "raw") == 0) {
        q = SkipRegexSpace(src_, q + 3);
        if (src_.compare(q, 3, "-%}") == 0) {
          raw = true;
          raw_end = SkipRegexSpace(src_, q + 3);
        } else if (src_.compare(q, 2, "%}") == 0) {
          raw = true;
          raw_end = q + 2;
        }
      }
    }
    EmitData(StripBefore(absl::string_view(src_).substr(pos_, t - pos_), kind, mod),
             static_cast<int>(pos_));
    line_starting_ = false;
    absl::Status s;
    if (raw) {
      s = LexRaw(t, raw_end);
    } else if (kind == '#') {
      s = LexComment(t, p);
    } else {
      s = LexTag(t, p, kind == '%');
    }
    if (!s.ok()) return s;
  }
  out_.push_back({Token::Type::kEof, "", static_cast<int>(src_.size())});
  return std::move(out_);
}

}  // namespace

std::string NormalizeTemplateSource(absl::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

absl::StatusOr<std::vector<Token>> Tokenize(const std::string& source) {
  return Lexer(source).Run();
}

std::string DescribeOffset(const std::string& source, int offset) {
  int line = 1, col = 1;
  for (int i = 0; i < offset && i < static_cast<int>(source.size()); ++i) {
    if (source[i] == '\n') {
      ++line;
      col = 1;
    } else if ((static_cast<unsigned char>(source[i]) & 0xC0) != 0x80) {
      ++col;
    }
  }
  return absl::StrCat("line ", line, " col ", col);
}

}  // namespace pdserve::jinja
