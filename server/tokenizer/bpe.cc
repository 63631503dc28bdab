#include "server/tokenizer/bpe.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <mutex>
#include <queue>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/tokenizer/pretokenizer.h"
#include "server/tokenizer/unicode.h"
#include "server/tokenizer/vocab.h"

namespace pdserve {
namespace {

// Code point standing for each byte, and the inverse (-1: not a stand-in).
struct ByteMap {
  std::array<uint32_t, 256> to_cp;
  std::array<int16_t, 324> from_cp;
  ByteMap() {
    from_cp.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      to_cp[b] = printable ? b : next++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& Bytes() {
  static const ByteMap map;
  return map;
}

constexpr uint64_t kNoMerge = std::numeric_limits<uint64_t>::max();
constexpr size_t kCacheCapacity = 1 << 16;  // words
constexpr size_t kCacheMaxWordBytes = 256;  // longer words are not cached
constexpr size_t kHeapThreshold = 48;       // symbols; above it use the heap

class ByteLevelBpe : public VocabTokenizer {
 public:
  ByteLevelBpe(const VocabSpec& spec, std::vector<std::string> token_bytes)
      : VocabTokenizer(spec, std::move(token_bytes)),
        pre_(spec.pre),
        nfc_(spec.nfc),
        ignore_merges_(spec.ignore_merges) {}

  absl::Status Init(const VocabSpec& spec);

 protected:
  void EncodeSegment(std::string_view text, bool at_start, bool after_special,
                     std::vector<int32_t>* out) const override;

 private:
  // (rank << 32 | merged id) of the pair, or kNoMerge.
  uint64_t PairValue(int32_t a, int32_t b) const {
    auto it =
        merges_.find(static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 |
                     static_cast<uint32_t>(b));
    return it == merges_.end() ? kNoMerge : it->second;
  }
  void EncodePiece(std::string_view piece, std::vector<int32_t>* out) const;
  void MergeSmall(std::vector<int32_t>* syms) const;
  void MergeLarge(std::vector<int32_t>* syms) const;

  PreTokenizerKind pre_;
  bool nfc_;
  bool ignore_merges_;
  std::array<int32_t, 256> byte_ids_;
  absl::flat_hash_map<uint64_t, uint64_t> merges_;
  absl::flat_hash_map<std::string, int32_t> normal_ids_;  // raw bytes -> id
  mutable std::mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_ ABSL_GUARDED_BY(cache_mu_);
};

absl::Status ByteLevelBpe::Init(const VocabSpec& spec) {
  absl::flat_hash_map<absl::string_view, int32_t> text_to_id;
  text_to_id.reserve(spec.tokens.size());
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    text_to_id.emplace(spec.tokens[id], static_cast<int32_t>(id));
    const TokenType t = spec.types[id];
    if (t == TokenType::kNormal || t == TokenType::kUndefined) {
      normal_ids_.emplace(TokenBytes(static_cast<int32_t>(id)),
                          static_cast<int32_t>(id));
    }
  }
  for (int b = 0; b < 256; ++b) {
    auto it = text_to_id.find(ByteToUnicode(static_cast<uint8_t>(b)));
    byte_ids_[b] = it == text_to_id.end() ? -1 : it->second;
  }
  merges_.reserve(spec.merges.size());
  std::string joined;
  size_t unusable = 0;
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    joined = left;
    joined += right;
    auto a = text_to_id.find(left);
    auto b = text_to_id.find(right);
    auto m = text_to_id.find(joined);
    if (a == text_to_id.end() || b == text_to_id.end() ||
        m == text_to_id.end()) {
      ++unusable;
      continue;
    }
    merges_.emplace(
        static_cast<uint64_t>(a->second) << 32 |
            static_cast<uint32_t>(b->second),
        static_cast<uint64_t>(rank) << 32 | static_cast<uint32_t>(m->second));
  }
  if (!spec.merges.empty() && unusable * 2 > spec.merges.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(unusable, " of ", spec.merges.size(),
                     " merges name tokens that are not in the vocabulary"));
  }
  return absl::OkStatus();
}

void ByteLevelBpe::EncodeSegment(std::string_view text, bool at_start,
                                 bool after_special,
                                 std::vector<int32_t>* out) const {
  std::string normalized;
  if (nfc_ && !unicode::IsNfcQuick(text)) {
    normalized = unicode::ToNfc(text);
    text = normalized;
  }
  thread_local std::vector<Piece> pieces;
  pieces.clear();
  PreTokenize(pre_, text, &pieces);
  for (const Piece& p : pieces) {
    EncodePiece(text.substr(p.begin, p.end - p.begin), out);
  }
}

void ByteLevelBpe::EncodePiece(std::string_view piece,
                               std::vector<int32_t>* out) const {
  if (piece.size() == 1) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(piece[0])];
    if (id >= 0) out->push_back(id);
    return;
  }
  const absl::string_view key(piece.data(), piece.size());
  if (ignore_merges_) {
    auto it = normal_ids_.find(key);
    if (it != normal_ids_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  const bool cacheable = piece.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  thread_local std::vector<int32_t> syms;
  syms.clear();
  for (char c : piece) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id >= 0) syms.push_back(id);  // bytes the vocabulary lacks are dropped
  }
  if (syms.size() > kHeapThreshold) {
    MergeLarge(&syms);
  } else {
    MergeSmall(&syms);
  }
  out->insert(out->end(), syms.begin(), syms.end());
  if (!cacheable) return;
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() < kCacheCapacity) cache_.emplace(key, syms);
}

// Quadratic scan over the pair values; fastest for short words.
void ByteLevelBpe::MergeSmall(std::vector<int32_t>* syms) const {
  std::vector<int32_t>& s = *syms;
  if (s.size() < 2) return;
  uint64_t vals[kHeapThreshold];
  size_t m = s.size();
  for (size_t k = 0; k + 1 < m; ++k) vals[k] = PairValue(s[k], s[k + 1]);
  while (m > 1) {
    size_t best = 0;
    for (size_t k = 1; k + 1 < m; ++k) {
      if (vals[k] < vals[best]) best = k;
    }
    if (vals[best] == kNoMerge) break;
    s[best] = static_cast<int32_t>(vals[best] & 0xFFFFFFFFu);
    // Remove symbol best+1 and pair value best.
    std::copy(s.begin() + best + 2, s.begin() + m, s.begin() + best + 1);
    std::copy(vals + best + 1, vals + m - 1, vals + best);
    --m;
    if (best > 0) vals[best - 1] = PairValue(s[best - 1], s[best]);
    if (best + 1 < m) vals[best] = PairValue(s[best], s[best + 1]);
  }
  s.resize(m);
}

// Linked list of symbols plus a min-heap of candidate pairs (rank, left
// position); stale entries are skipped when popped.
void ByteLevelBpe::MergeLarge(std::vector<int32_t>* syms) const {
  std::vector<int32_t>& s = *syms;
  const int n = static_cast<int>(s.size());
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    uint64_t value;
    int left;
    int right;
    int32_t left_id;
    int32_t right_id;
    bool operator>(const Cand& o) const {
      return value != o.value ? value > o.value : left > o.left;
    }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const uint64_t v = PairValue(s[l], s[r]);
    if (v != kNoMerge) heap.push({v, l, r, s[l], s[r]});
  };
  for (int i = 0; i + 1 < n; ++i) push(i, i + 1);
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (dead[c.left] || dead[c.right] || next[c.left] != c.right ||
        s[c.left] != c.left_id || s[c.right] != c.right_id) {
      continue;
    }
    s[c.left] = static_cast<int32_t>(c.value & 0xFFFFFFFFu);
    dead[c.right] = true;
    next[c.left] = next[c.right];
    if (next[c.right] >= 0) prev[next[c.right]] = c.left;
    push(prev[c.left], c.left);
    push(c.left, next[c.left]);
  }
  size_t m = 0;
  for (int i = 0; i >= 0 && i < n; i = next[i]) s[m++] = s[i];
  s.resize(m);
}

}  // namespace

std::string ByteToUnicode(uint8_t b) {
  std::string out;
  unicode::AppendUtf8(Bytes().to_cp[b], &out);
  return out;
}

std::string ByteLevelDecode(std::string_view text) {
  const ByteMap& map = Bytes();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const int len = unicode::ValidSequenceLength(text, i);
    if (len == 0) {  // not UTF-8: keep the byte
      out.push_back(text[i++]);
      continue;
    }
    uint32_t cp;
    unicode::DecodeValid(text.data() + i, &cp);
    if (cp < map.from_cp.size() && map.from_cp[cp] >= 0) {
      out.push_back(static_cast<char>(map.from_cp[cp]));
    } else {
      out.append(text.data() + i, len);
    }
    i += len;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> BuildByteLevelBpeTokenizer(
    VocabSpec spec) {
  std::vector<std::string> bytes(spec.tokens.size());
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    const TokenType t = spec.types[id];
    const bool raw = t == TokenType::kControl || t == TokenType::kUserDefined ||
                     t == TokenType::kUnknown;
    bytes[id] = raw ? spec.tokens[id] : ByteLevelDecode(spec.tokens[id]);
  }
  auto tok =
      std::unique_ptr<ByteLevelBpe>(new ByteLevelBpe(spec, std::move(bytes)));
  if (absl::Status s = tok->Init(spec); !s.ok()) return s;
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace pdserve
