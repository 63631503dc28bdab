#include "server/chat/control_tokens.h"

#include <algorithm>
#include <cstring>

namespace pdserve {
namespace {

constexpr size_t kMarkerLen = 4;

bool IsMarkerAt(absl::string_view s, size_t pos) {
  return pos + kMarkerLen <= s.size() &&
         (s.compare(pos, kMarkerLen, kControlTokenStart) == 0 ||
          s.compare(pos, kMarkerLen, kControlTokenEnd) == 0);
}

}  // namespace

ControlTokenSet::ControlTokenSet(const std::vector<std::string>& tokens) {
  for (const std::string& t : tokens) {
    if (t.empty()) continue;
    auto& list = by_first_byte_[t[0]];
    if (std::find(list.begin(), list.end(), t) == list.end()) list.push_back(t);
  }
  for (auto& [c, list] : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(),
                     [](const std::string& a, const std::string& b) {
                       return a.size() > b.size();
                     });
  }
}

size_t ControlTokenSet::MatchAt(absl::string_view s, size_t pos) const {
  auto it = by_first_byte_.find(s[pos]);
  if (it == by_first_byte_.end()) return 0;
  for (const std::string& t : it->second) {
    if (s.compare(pos, t.size(), t) == 0) return t.size();
  }
  return 0;
}

std::string ControlTokenSet::Mark(absl::string_view s) const {
  std::string clean;
  clean.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (IsMarkerAt(s, i)) {
      i += kMarkerLen;
    } else {
      clean.push_back(s[i++]);
    }
  }
  if (empty()) return clean;
  std::string out;
  out.reserve(clean.size());
  for (size_t i = 0; i < clean.size();) {
    size_t n = MatchAt(clean, i);
    if (n == 0) {
      out.push_back(clean[i++]);
      continue;
    }
    out += kControlTokenStart;
    out.append(clean, i, n);
    out += kControlTokenEnd;
    i += n;
  }
  return out;
}

jinja::Value ControlTokenSet::MarkValue(const jinja::Value& v) const {
  using K = jinja::Value::Kind;
  switch (v.kind()) {
    case K::kString:
      return jinja::Value::String(Mark(v.as_string()));
    case K::kList: {
      std::vector<jinja::Value> items;
      items.reserve(v.as_list().items.size());
      for (const jinja::Value& item : v.as_list().items) items.push_back(MarkValue(item));
      return jinja::Value::List(std::move(items), v.as_list().tuple);
    }
    case K::kDict: {
      jinja::ValueDict d;
      for (const auto& [k, item] : v.as_dict().items()) d.Set(k, MarkValue(item));
      return jinja::Value::Dict(std::move(d));
    }
    default:
      return v;
  }
}

std::vector<PromptSegment> ControlTokenSet::Split(absl::string_view rendered) const {
  std::vector<PromptSegment> out;
  std::string text;
  auto flush = [&]() {
    if (!text.empty()) out.push_back({std::move(text), false});
    text.clear();
  };
  for (size_t i = 0; i < rendered.size();) {
    if (!IsMarkerAt(rendered, i)) {
      text.push_back(rendered[i++]);
      continue;
    }
    flush();
    if (rendered.compare(i, kMarkerLen, kControlTokenStart) == 0) {
      size_t p = i + kMarkerLen;
      size_t n = p < rendered.size() ? MatchAt(rendered, p) : 0;
      if (n > 0 && rendered.compare(p + n, kMarkerLen, kControlTokenEnd) == 0) {
        out.push_back({std::string(rendered.substr(p, n)), true});
        i += 2 * kMarkerLen + n;
        continue;
      }
    }
    i += kMarkerLen;  // a lone marker: dropped, but it broke the text
  }
  flush();
  return out;
}

}  // namespace pdserve
