#include "server/chat/tool_call_scan.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace pdserve {
namespace {

using Json = nlohmann::json;

size_t SkipSpace(absl::string_view s, size_t i) {
  while (i < s.size() && IsJsonSpace(s[i])) ++i;
  return i;
}

// The end of the string literal starting at s[i] == '"'.
size_t ScanString(absl::string_view s, size_t i) {
  for (size_t j = i + 1; j < s.size(); ++j) {
    if (s[j] == '\\') {
      ++j;
    } else if (s[j] == '"') {
      return j + 1;
    } else if (static_cast<unsigned char>(s[j]) < 0x20) {
      return kScanError;
    }
  }
  return kScanIncomplete;
}

std::optional<std::string> DecodeString(absl::string_view literal) {
  Json j = Json::parse(literal, nullptr, /*allow_exceptions=*/false);
  if (!j.is_string()) return std::nullopt;
  return j.get<std::string>();
}

// The value text of an XML parameter: one leading and one trailing newline
// dropped.
absl::string_view TrimValue(absl::string_view v) {
  if (!v.empty() && v.front() == '\n') v.remove_prefix(1);
  if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
  return v;
}

// The JSON type(s) the schema of `tool`'s parameter `param` names; empty
// when unknown.
std::vector<std::string> ParamTypes(const Json& tools, const std::string& tool,
                                    const std::string& param) {
  std::vector<std::string> types;
  if (!tools.is_array()) return types;
  for (const Json& t : tools) {
    const Json* fn = t.is_object() && t.contains("function") ? &t["function"] : &t;
    if (!fn->is_object() || fn->value("name", "") != tool) continue;
    auto params = fn->find("parameters");
    if (params == fn->end() || !params->is_object()) break;
    auto props = params->find("properties");
    if (props == params->end() || !props->is_object()) break;
    auto p = props->find(param);
    if (p == props->end() || !p->is_object()) break;
    auto type = p->find("type");
    if (type != p->end() && type->is_string()) types.push_back(*type);
    if (type != p->end() && type->is_array()) {
      for (const Json& x : *type) {
        if (x.is_string()) types.push_back(x);
      }
    }
    if (types.empty() && (p->contains("properties"))) types.push_back("object");
    break;
  }
  return types;
}

std::string ParamJson(const Json& tools, const std::string& tool,
                      const std::string& param, absl::string_view value) {
  const std::vector<std::string> types = ParamTypes(tools, tool, param);
  bool non_string = false;
  for (const std::string& t : types) non_string |= t != "string";
  if (non_string) {
    Json j = Json::parse(value, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) return j.dump();
  }
  return Json(std::string(value)).dump(-1, ' ', false,
                                       Json::error_handler_t::replace);
}

}  // namespace

bool IsJsonSpace(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

size_t ScanJsonValueEnd(absl::string_view s, size_t i) {
  if (i >= s.size()) return kScanIncomplete;
  const char c = s[i];
  if (c == '"') return ScanString(s, i);
  if (c == '{' || c == '[') {
    std::vector<char> stack;
    for (size_t j = i; j < s.size(); ++j) {
      const char d = s[j];
      if (d == '"') {
        const size_t end = ScanString(s, j);
        if (end == kScanIncomplete || end == kScanError) return end;
        j = end - 1;
      } else if (d == '{' || d == '[') {
        stack.push_back(d == '{' ? '}' : ']');
      } else if (d == '}' || d == ']') {
        if (stack.empty() || stack.back() != d) return kScanError;
        stack.pop_back();
        if (stack.empty()) return j + 1;
      }
    }
    return kScanIncomplete;
  }
  // A number or literal: runs to a delimiter.
  size_t j = i;
  while (j < s.size() && !IsJsonSpace(s[j]) && s[j] != ',' && s[j] != '}' &&
         s[j] != ']' && s[j] != ';') {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(s[j])) &&
        s[j] != '-' && s[j] != '+' && s[j] != '.') {
      return kScanError;
    }
    ++j;
  }
  if (j == s.size()) return kScanIncomplete;
  return j == i ? kScanError : j;
}

CallScan ScanJsonCall(absl::string_view body, bool complete) {
  CallScan scan;
  size_t i = SkipSpace(body, 0);
  if (i == body.size() || body[i] != '{') return scan;
  ++i;
  for (;;) {
    i = SkipSpace(body, i);
    if (i == body.size() || body[i] == '}') return scan;
    if (body[i] == ',') {
      ++i;
      continue;
    }
    if (body[i] != '"') return scan;
    const size_t key_end = ScanString(body, i);
    if (key_end == kScanIncomplete || key_end == kScanError) return scan;
    const std::string key =
        DecodeString(body.substr(i, key_end - i)).value_or("");
    i = SkipSpace(body, key_end);
    if (i == body.size() || body[i] != ':') return scan;
    i = SkipSpace(body, i + 1);
    if (i == body.size()) return scan;
    const size_t start = i;
    size_t end = ScanJsonValueEnd(body, start);
    // The call's last value may be a number cut by the end of the text.
    if (end == kScanIncomplete && complete && body[start] != '"' &&
        body[start] != '{' && body[start] != '[') {
      end = body.size();
    }
    if (end == kScanError) return scan;
    const bool done = end != kScanIncomplete;
    if (key == "name" && done && body[start] == '"') {
      scan.name = DecodeString(body.substr(start, end - start));
    } else if (key == "arguments" || key == "parameters") {
      if (body[start] == '"') {
        if (done) {
          scan.arguments =
              DecodeString(body.substr(start, end - start)).value_or("");
        }
      } else {
        scan.arguments = std::string(body.substr(start, done ? end - start
                                                             : body.size() - start));
      }
    }
    if (!done) return scan;
    i = end;
  }
}

CallScan ScanXmlCall(absl::string_view body, bool complete, const Json& tools) {
  CallScan scan;
  constexpr absl::string_view kFunction = "<function=";
  constexpr absl::string_view kParam = "<parameter=";
  constexpr absl::string_view kParamEnd = "</parameter>";
  constexpr absl::string_view kFunctionEnd = "</function>";
  const size_t f = body.find(kFunction);
  if (f == absl::string_view::npos) return scan;
  const size_t name_end = body.find('>', f);
  if (name_end == absl::string_view::npos) return scan;
  const std::string name(absl::StripAsciiWhitespace(
      body.substr(f + kFunction.size(), name_end - f - kFunction.size())));
  scan.name = name;
  const size_t fn_end = body.find(kFunctionEnd, name_end);
  const absl::string_view inner = body.substr(
      name_end + 1,
      (fn_end == absl::string_view::npos ? body.size() : fn_end) - name_end - 1);
  std::string args = "{";
  size_t i = 0;
  int count = 0;
  for (;;) {
    const size_t p = inner.find(kParam, i);
    if (p == absl::string_view::npos) break;
    const size_t pe = inner.find('>', p);
    if (pe == absl::string_view::npos) break;
    size_t ve = inner.find(kParamEnd, pe);
    const bool closed = ve != absl::string_view::npos;
    if (!closed) {
      // A value cut off by the end of the call still counts at the end.
      if (!complete && fn_end == absl::string_view::npos) break;
      ve = inner.size();
    }
    const std::string param(absl::StripAsciiWhitespace(
        inner.substr(p + kParam.size(), pe - p - kParam.size())));
    const absl::string_view value = TrimValue(inner.substr(pe + 1, ve - pe - 1));
    absl::StrAppend(&args, count++ > 0 ? ", " : "",
                    Json(param).dump(-1, ' ', false, Json::error_handler_t::replace),
                    ": ", ParamJson(tools, name, param, value));
    if (!closed) break;
    i = ve + kParamEnd.size();
  }
  if (complete || fn_end != absl::string_view::npos) args += "}";
  scan.arguments = std::move(args);
  return scan;
}

}  // namespace pdserve
