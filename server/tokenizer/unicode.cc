#include "server/tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "server/tokenizer/unicode_data.h"

namespace pdserve::unicode {
namespace {

namespace ud = ::pdserve::unicode_data;

uint8_t FlagsFromRuns(uint32_t cp) {
  // Last run whose start <= cp.
  const uint32_t* end = ud::kFlagRuns + ud::kFlagRunsSize;
  const uint32_t* it = std::upper_bound(
      ud::kFlagRuns, end, cp,
      [](uint32_t value, uint32_t run) { return value < (run >> 8); });
  if (it == ud::kFlagRuns) return 0;
  return static_cast<uint8_t>(it[-1] & 0xFF);
}

// Flags of the Basic Multilingual Plane, expanded once (64 KiB).
const uint8_t* BmpTable() {
  static const uint8_t* table = [] {
    auto* t = new uint8_t[0x10000];
    for (int i = 0; i < ud::kFlagRunsSize; ++i) {
      const uint32_t start = ud::kFlagRuns[i] >> 8;
      if (start >= 0x10000) break;
      const uint32_t stop =
          i + 1 < ud::kFlagRunsSize
              ? std::min<uint32_t>(ud::kFlagRuns[i + 1] >> 8, 0x10000)
              : 0x10000;
      std::fill(t + start, t + stop, static_cast<uint8_t>(ud::kFlagRuns[i]));
    }
    return t;
  }();
  return table;
}

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161,
                   kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint32_t CombiningClass(uint32_t cp) {
  if (cp < 0x300) return 0;
  const ud::CccRun* end = ud::kCccRuns + ud::kCccRunsSize;
  const ud::CccRun* it = std::upper_bound(
      ud::kCccRuns, end, cp,
      [](uint32_t value, const ud::CccRun& r) { return value < r.first; });
  if (it == ud::kCccRuns || cp > it[-1].last) return 0;
  return it[-1].ccc;
}

void Decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const ud::Decomposition* end = ud::kDecomp + ud::kDecompSize;
  const ud::Decomposition* it = std::lower_bound(
      ud::kDecomp, end, cp,
      [](const ud::Decomposition& d, uint32_t value) { return d.cp < value; });
  if (it == end || it->cp != cp) {
    out->push_back(cp);
    return;
  }
  Decompose(it->first, out);
  const uint32_t second = it->second & ~ud::kPrimaryComposite;
  if (second != 0) Decompose(second, out);
}

// The primary composite of (a, b), or 0.
uint32_t Compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase &&
      b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 &&
      b > kTBase && b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  // Primary composites sorted by (first, second), built once.
  struct Pair {
    uint32_t first, second, composite;
    bool operator<(const Pair& o) const {
      return first != o.first ? first < o.first : second < o.second;
    }
  };
  static const std::vector<Pair>* pairs = [] {
    auto* v = new std::vector<Pair>();
    for (int i = 0; i < ud::kDecompSize; ++i) {
      const ud::Decomposition& d = ud::kDecomp[i];
      if (d.second & ud::kPrimaryComposite) {
        v->push_back({d.first, d.second & ~ud::kPrimaryComposite, d.cp});
      }
    }
    std::sort(v->begin(), v->end());
    return v;
  }();
  auto it = std::lower_bound(pairs->begin(), pairs->end(), Pair{a, b, 0});
  if (it == pairs->end() || it->first != a || it->second != b) return 0;
  return it->composite;
}

// Canonical ordering: stable sort of each run of non-starters by class.
void CanonicalOrder(std::vector<uint32_t>* cps) {
  std::vector<uint32_t>& v = *cps;
  size_t i = 0;
  while (i < v.size()) {
    if (CombiningClass(v[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < v.size() && CombiningClass(v[j]) != 0) ++j;
    std::stable_sort(v.begin() + i, v.begin() + j, [](uint32_t x, uint32_t y) {
      return CombiningClass(x) < CombiningClass(y);
    });
    i = j;
  }
}

void ComposeAll(std::vector<uint32_t>* cps) {
  std::vector<uint32_t>& v = *cps;
  if (v.empty()) return;
  size_t starter = 0;
  uint32_t last_class = CombiningClass(v[0]);
  if (last_class != 0) last_class = 256;  // nothing before can compose
  size_t out = 1;
  for (size_t i = 1; i < v.size(); ++i) {
    const uint32_t ch = v[i];
    const uint32_t ch_class = CombiningClass(ch);
    const uint32_t composite = Compose(v[starter], ch);
    if (composite != 0 && (last_class < ch_class || last_class == 0)) {
      v[starter] = composite;
      continue;
    }
    if (ch_class == 0) starter = out;
    last_class = ch_class;
    v[out++] = ch;
  }
  v.resize(out);
}

}  // namespace

uint8_t Flags(uint32_t cp) {
  if (cp < 0x10000) return BmpTable()[cp];
  return FlagsFromRuns(cp);
}

int ExamineUtf8(std::string_view text, size_t pos, size_t* subpart) {
  const size_t n = text.size() - pos;
  const uint8_t b0 = static_cast<uint8_t>(text[pos]);
  *subpart = 1;
  if (b0 < 0x80) return 1;
  int len = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int k = 1; k < len; ++k) {
    if (static_cast<size_t>(k) >= n) return 0;
    const uint8_t b = static_cast<uint8_t>(text[pos + k]);
    if (b < lo || b > hi) return 0;
    lo = 0x80;
    hi = 0xBF;
    *subpart = k + 1;
  }
  return len;
}

int ValidSequenceLength(std::string_view text, size_t pos) {
  size_t subpart;
  return ExamineUtf8(text, pos, &subpart);
}

absl::Status ValidateUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII fast path, 8 bytes at a time.
    while (pos + 8 <= text.size()) {
      uint64_t word;
      std::copy_n(text.data() + pos, 8, reinterpret_cast<char*>(&word));
      if (word & 0x8080808080808080ull) break;
      pos += 8;
    }
    if (pos >= text.size()) break;
    const int len = ValidSequenceLength(text, pos);
    if (len == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "invalid UTF-8 at byte offset %d (byte 0x%02X) of %d-byte text", pos,
          static_cast<uint8_t>(text[pos]), text.size()));
    }
    pos += len;
  }
  return absl::OkStatus();
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
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

std::string ReplaceInvalidUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t subpart;
    const int len = ExamineUtf8(bytes, pos, &subpart);
    if (len > 0) {
      out.append(bytes.data() + pos, len);
      pos += len;
    } else {
      out.append("\xEF\xBF\xBD");
      pos += subpart;
    }
  }
  return out;
}

bool IsNfcQuick(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    if (static_cast<uint8_t>(text[i]) < 0xCC) {  // below U+0300
      i += static_cast<uint8_t>(text[i]) < 0x80 ? 1 : 2;
      continue;
    }
    uint32_t cp;
    i += DecodeValid(text.data() + i, &cp);
    if (Flags(cp) & kNfcUnsafe) return false;
  }
  return true;
}

std::string ToNfc(std::string_view text) {
  if (IsNfcQuick(text)) return std::string(text);
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    i += DecodeValid(text.data() + i, &cp);
    Decompose(cp, &cps);
  }
  CanonicalOrder(&cps);
  ComposeAll(&cps);
  std::string out;
  out.reserve(text.size());
  for (uint32_t cp : cps) AppendUtf8(cp, &out);
  return out;
}

}  // namespace pdserve::unicode
