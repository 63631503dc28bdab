#include "server/tokenizer/detokenizer.h"

#include <algorithm>

#include "server/tokenizer/unicode.h"

namespace pdserve {

Detokenizer::Detokenizer(const Tokenizer& tokenizer, Options options)
    : tokenizer_(tokenizer),
      options_(std::move(options)),
      first_text_(options_.strip_space_prefix && tokenizer.add_space_prefix()) {
  for (const std::string& s : options_.stop_strings) {
    max_stop_len_ = std::max(max_stop_len_, s.size());
  }
}

std::string Detokenizer::Feed(int32_t id) {
  if (stopped()) return "";
  const bool special = tokenizer_.IsSpecial(id);
  if (special && options_.skip_special_tokens) return "";
  std::string piece = tokenizer_.TokenBytes(id);
  if (first_text_ && !special) {
    if (!piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    first_text_ = false;
  }
  bytes_ += piece;
  DrainBytes(/*at_end=*/false);
  return Release(/*at_end=*/false);
}

std::string Detokenizer::Finish() {
  if (stopped()) return "";
  DrainBytes(/*at_end=*/true);
  return Release(/*at_end=*/true);
}

void Detokenizer::DrainBytes(bool at_end) {
  size_t pos = 0;
  while (pos < bytes_.size()) {
    size_t subpart;
    const int len = unicode::ExamineUtf8(bytes_, pos, &subpart);
    if (len > 0) {
      held_.append(bytes_, pos, len);
      pos += len;
      continue;
    }
    const uint8_t lead = static_cast<uint8_t>(bytes_[pos]);
    const bool may_complete =
        lead >= 0xC2 && lead <= 0xF4 && pos + subpart == bytes_.size();
    if (may_complete && !at_end) break;  // wait for the next token
    held_ += "\xEF\xBF\xBD";
    pos += subpart;
  }
  bytes_.erase(0, pos);
}

std::string Detokenizer::Release(bool at_end) {
  // The earliest stop string occurrence wins.
  size_t best_pos = std::string::npos;
  for (size_t i = 0; i < options_.stop_strings.size(); ++i) {
    const std::string& s = options_.stop_strings[i];
    if (s.empty()) continue;
    const size_t p = held_.find(s);
    if (p != std::string::npos && p < best_pos) {
      best_pos = p;
      stop_index_ = static_cast<int>(i);
    }
  }
  if (best_pos != std::string::npos) {
    std::string out = held_.substr(0, best_pos);
    held_.clear();
    bytes_.clear();
    return out;
  }
  size_t keep = 0;
  if (!at_end) {
    // Longest suffix of held_ that is a proper prefix of a stop string.
    const size_t limit =
        std::min(held_.size(), max_stop_len_ == 0 ? 0 : max_stop_len_ - 1);
    for (size_t k = limit; k > 0 && keep == 0; --k) {
      const std::string_view tail(held_.data() + held_.size() - k, k);
      for (const std::string& s : options_.stop_strings) {
        if (s.size() > k && std::string_view(s).substr(0, k) == tail) {
          keep = k;
          break;
        }
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

}  // namespace pdserve
