#include "server/chat/jinja/text.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace pdserve::jinja {
namespace {

bool IsAsciiLetter(char32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
char32_t ToUpperAscii(char32_t c) {
  return (c >= 'a' && c <= 'z') ? c - 32 : c;
}
char32_t ToLowerAscii(char32_t c) {
  return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

bool InSet(char32_t cp, const std::vector<char32_t>& set) {
  return std::find(set.begin(), set.end(), cp) != set.end();
}

// Splits on runs of whitespace (Python str.split() without sep), from the
// left, keeping the remainder unsplit after `maxsplit` splits.
std::vector<std::string> SplitWhitespace(const std::vector<char32_t>& cps,
                                         int64_t maxsplit) {
  std::vector<std::string> parts;
  size_t i = 0, n = cps.size();
  while (true) {
    while (i < n && IsPythonSpace(cps[i])) ++i;
    if (i >= n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
      size_t end = n;
      while (end > i && IsPythonSpace(cps[end - 1])) --end;
      parts.push_back(EncodeUtf8({cps.begin() + i, cps.begin() + end}));
      break;
    }
    size_t j = i;
    while (j < n && !IsPythonSpace(cps[j])) ++j;
    parts.push_back(EncodeUtf8({cps.begin() + i, cps.begin() + j}));
    i = j;
  }
  return parts;
}

}  // namespace

std::vector<char32_t> DecodeUtf8(absl::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3
              : (c >> 3) == 30 ? 4 : 0;
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F)
                                                                  : (c & 0x07);
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      unsigned char cc = s[i + k];
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (ok) {
      static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= kMin[len] && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
    }
    if (!ok) {
      out.push_back(0xDC00 + c);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // surrogateescape'd raw byte
    out->push_back(static_cast<char>(cp - 0xDC00));
  } else if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string EncodeUtf8(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) AppendUtf8(cp, &out);
  return out;
}

int64_t CodePointLength(absl::string_view s) {
  bool ascii = std::all_of(s.begin(), s.end(),
                           [](char c) { return (c & 0x80) == 0; });
  return ascii ? static_cast<int64_t>(s.size())
               : static_cast<int64_t>(DecodeUtf8(s).size());
}

bool IsPythonSpace(char32_t cp) {
  if (cp <= 0x20) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) ||
                         (cp >= 0x1C && cp <= 0x1F);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string PyStrip(absl::string_view s, const std::optional<std::string>& chars,
                    bool left, bool right) {
  std::vector<char32_t> cps = DecodeUtf8(s);
  std::vector<char32_t> set;
  if (chars.has_value()) set = DecodeUtf8(*chars);
  auto strip = [&](char32_t cp) {
    return chars.has_value() ? InSet(cp, set) : IsPythonSpace(cp);
  };
  size_t b = 0, e = cps.size();
  if (left) while (b < e && strip(cps[b])) ++b;
  if (right) while (e > b && strip(cps[e - 1])) --e;
  return EncodeUtf8({cps.begin() + b, cps.begin() + e});
}

std::vector<std::string> PySplit(absl::string_view s,
                                 const std::optional<std::string>& sep,
                                 int64_t maxsplit) {
  if (!sep.has_value()) return SplitWhitespace(DecodeUtf8(s), maxsplit);
  std::vector<std::string> parts;
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    size_t hit = s.find(*sep, pos);
    if (hit == absl::string_view::npos) break;
    parts.emplace_back(s.substr(pos, hit - pos));
    pos = hit + sep->size();
  }
  parts.emplace_back(s.substr(pos));
  return parts;
}

std::vector<std::string> PyRSplit(absl::string_view s,
                                  const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  std::vector<std::string> parts;
  if (!sep.has_value()) {
    std::vector<char32_t> cps = DecodeUtf8(s);
    size_t e = cps.size();
    while (true) {
      while (e > 0 && IsPythonSpace(cps[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        size_t b = 0;
        while (b < e && IsPythonSpace(cps[b])) ++b;
        parts.push_back(EncodeUtf8({cps.begin() + b, cps.begin() + e}));
        break;
      }
      size_t b = e;
      while (b > 0 && !IsPythonSpace(cps[b - 1])) --b;
      parts.push_back(EncodeUtf8({cps.begin() + b, cps.begin() + e}));
      e = b;
    }
  } else {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == absl::string_view::npos) break;
      parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    parts.emplace_back(s.substr(0, end));
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::string PyReplace(absl::string_view s, absl::string_view old_s,
                      absl::string_view new_s, int64_t count) {
  std::string out;
  if (old_s.empty()) {
    std::vector<char32_t> cps = DecodeUtf8(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out.append(new_s.data(), new_s.size());
        ++done;
      }
      if (i < cps.size()) AppendUtf8(cps[i], &out);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old_s, pos);
    if (hit == absl::string_view::npos) break;
    out.append(s.data() + pos, hit - pos);
    out.append(new_s.data(), new_s.size());
    pos = hit + old_s.size();
    ++done;
  }
  out.append(s.data() + pos, s.size() - pos);
  return out;
}

std::string AsciiUpper(absl::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(ToUpperAscii(c));
  return out;
}

std::string AsciiLower(absl::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(ToLowerAscii(c));
  return out;
}

std::string PyTitle(absl::string_view s) {
  std::string out(s);
  bool prev_letter = false;
  for (char& c : out) {
    unsigned char u = c;
    c = static_cast<char>(prev_letter ? ToLowerAscii(u) : ToUpperAscii(u));
    // Non-ASCII bytes count as letters' continuation: treat as cased.
    prev_letter = IsAsciiLetter(u) || u >= 0x80;
  }
  return out;
}

std::string PyCapitalize(absl::string_view s) {
  std::string out = AsciiLower(s);
  if (!out.empty()) out[0] = static_cast<char>(ToUpperAscii(out[0]));
  return out;
}

std::vector<int64_t> SliceIndices(int64_t length, std::optional<int64_t> start,
                                  std::optional<int64_t> stop, int64_t step) {
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) -> int64_t {
    if (!v.has_value()) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += length;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= length) {
      x = step < 0 ? length - 1 : length;
    }
    return x;
  };
  std::vector<int64_t> idx;
  if (step > 0) {
    int64_t b = clamp(start, 0), e = clamp(stop, length);
    for (int64_t i = b; i < e; i += step) idx.push_back(i);
  } else {
    int64_t b = clamp(start, length - 1), e = clamp(stop, -1);
    for (int64_t i = b; i > e; i += step) idx.push_back(i);
  }
  return idx;
}

std::string PyReprString(absl::string_view s) {
  bool has_single = s.find('\'') != absl::string_view::npos;
  bool has_double = s.find('"') != absl::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : DecodeUtf8(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0xA0) ||
               cp == 0xAD) {
      out += absl::StrFormat("\\x%02x", static_cast<unsigned>(cp));
    } else if (cp >= 0xDC80 && cp <= 0xDCFF) {
      out += absl::StrFormat("\\udc%02x", static_cast<unsigned>(cp & 0xFF));
    } else if (cp == 0x2028 || cp == 0x2029) {
      out += absl::StrFormat("\\u%04x", static_cast<unsigned>(cp));
    } else {
      AppendUtf8(cp, &out);
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace pdserve::jinja
