// Python object model pieces of the Jinja subset: argument binding,
// iteration, attribute/item access, `in`, ordering, and str/dict/list
// methods.
#include <algorithm>
#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/chat/jinja/builtins.h"
#include "common/status_macros.h"
#include "server/chat/jinja/text.h"

namespace pdserve::jinja {
namespace {

absl::StatusOr<std::optional<std::string>> OptString(
    absl::string_view fn, const std::optional<Value>& v) {
  if (!v.has_value() || v->is_none()) return std::optional<std::string>();
  if (!v->is_string()) {
    return TypeError(absl::StrCat(fn, "() argument must be str or None, not ",
                                  v->TypeName()));
  }
  return std::optional<std::string>(v->as_string());
}

absl::StatusOr<int64_t> IntArg(absl::string_view fn,
                               const std::optional<Value>& v, int64_t dflt) {
  if (!v.has_value() || v->is_none()) return dflt;
  if (v->kind() == Value::Kind::kInt) return v->as_int();
  if (v->kind() == Value::Kind::kBool) return v->as_bool() ? 1 : 0;
  return TypeError(absl::StrCat(fn, "() expects an int, got ", v->TypeName()));
}

absl::StatusOr<std::string> StrArg(absl::string_view fn,
                                   const std::optional<Value>& v) {
  if (!v.has_value()) {
    return TypeError(absl::StrCat(fn, "() missing a required argument"));
  }
  if (!v->is_string()) {
    return TypeError(absl::StrCat(fn, "() argument must be str, not ",
                                  v->TypeName()));
  }
  return v->as_string();
}

Value StringList(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.push_back(Value::String(std::move(p)));
  return Value::List(std::move(items));
}

// str.startswith / endswith with a str or a tuple/list of str.
absl::StatusOr<Value> AffixCheck(absl::string_view s, const Value& arg,
                                 bool prefix) {
  std::vector<Value> options;
  if (arg.kind() == Value::Kind::kList) {
    options = arg.as_list().items;
  } else {
    options.push_back(arg);
  }
  for (const Value& o : options) {
    if (!o.is_string()) {
      return TypeError(absl::StrCat(prefix ? "startswith" : "endswith",
                                    " first arg must be str or a tuple of str, not ",
                                    o.TypeName()));
    }
    absl::string_view a = o.as_string();
    if (a.size() <= s.size() &&
        (prefix ? s.substr(0, a.size()) == a : s.substr(s.size() - a.size()) == a)) {
      return Value::Bool(true);
    }
  }
  return Value::Bool(false);
}

// str.format with "{}", "{0}", "{name}", "{!r}" fields, no format specs.
absl::StatusOr<Value> StrFormat(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}' ) {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) {
      return absl::InvalidArgumentError("str.format: single '{' in format string");
    }
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    bool repr = false;
    if (field.size() >= 2 && field[field.size() - 2] == '!') {
      if (field.back() != 'r' && field.back() != 's') {
        return absl::InvalidArgumentError("str.format: unsupported conversion");
      }
      repr = field.back() == 'r';
      field.resize(field.size() - 2);
    }
    if (field.find(':') != std::string::npos || field.find('.') != std::string::npos ||
        field.find('[') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "str.format: unsupported field '{", field, "}' (format specs and "
          "attribute access are not supported)"));
    }
    const Value* v = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), ::isdigit)) {
      size_t idx = field.empty() ? auto_index++ : std::stoul(field);
      if (idx >= args.positional.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "str.format: replacement index ", idx, " out of range for ",
            args.positional.size(), " positional args"));
      }
      v = &args.positional[idx];
    } else {
      for (const auto& [k, kv] : args.kwargs) {
        if (k == field) v = &kv;
      }
      if (v == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("str.format: missing keyword argument '", field, "'"));
      }
    }
    out += repr ? v->Repr() : v->Str();
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> StringMethod(const std::string& s, absl::string_view name,
                                   const CallArgs& args) {
  auto bind = [&](std::vector<std::string> params) {
    return BindArgs(absl::StrCat("str.", name), args, params);
  };
  if (name == "startswith" || name == "endswith") {
    PDSERVE_ASSIGN_OR_RETURN(auto a, bind({"prefix"}));
    if (!a[0].has_value()) return TypeError(absl::StrCat(name, "() takes one argument"));
    return AffixCheck(s, *a[0], name == "startswith");
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    PDSERVE_ASSIGN_OR_RETURN(auto a, bind({"chars"}));
    PDSERVE_ASSIGN_OR_RETURN(auto chars, OptString(name, a[0]));
    return Value::String(PyStrip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    PDSERVE_ASSIGN_OR_RETURN(auto a, bind({"sep", "maxsplit"}));
    PDSERVE_ASSIGN_OR_RETURN(auto sep, OptString(name, a[0]));
    PDSERVE_ASSIGN_OR_RETURN(int64_t maxsplit, IntArg(name, a[1], -1));
    if (sep.has_value() && sep->empty()) {
      return absl::InvalidArgumentError("ValueError: empty separator");
    }
    return StringList(name == "split" ? PySplit(s, sep, maxsplit)
                                      : PyRSplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    std::vector<std::string> lines = PySplit(s, std::string("\n"), -1);
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    for (auto& l : lines) {
      if (!l.empty() && l.back() == '\r') l.pop_back();
    }
    return StringList(std::move(lines));
  }
  if (name == "replace") {
    PDSERVE_ASSIGN_OR_RETURN(auto a, bind({"old", "new", "count"}));
    PDSERVE_ASSIGN_OR_RETURN(std::string o, StrArg(name, a[0]));
    PDSERVE_ASSIGN_OR_RETURN(std::string n, StrArg(name, a[1]));
    PDSERVE_ASSIGN_OR_RETURN(int64_t count, IntArg(name, a[2], -1));
    return Value::String(PyReplace(s, o, n, count));
  }
  if (name == "lower" || name == "upper" || name == "title" ||
      name == "capitalize") {
    PDSERVE_ASSIGN_OR_RETURN(auto a, bind({}));
    (void)a;
    return Value::String(name == "lower"   ? AsciiLower(s)
                         : name == "upper" ? AsciiUpper(s)
                         : name == "title" ? PyTitle(s)
                                           : PyCapitalize(s));
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    PDSERVE_ASSIGN_OR_RETURN(auto a, bind({"sub"}));
    PDSERVE_ASSIGN_OR_RETURN(std::string sub, StrArg(name, a[0]));
    if (name == "count") {
      if (sub.empty()) return Value::Int(CodePointLength(s) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::Int(n);
    }
    size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
    if (p == std::string::npos) {
      if (name == "index") return absl::InvalidArgumentError("ValueError: substring not found");
      return Value::Int(-1);
    }
    return Value::Int(CodePointLength(absl::string_view(s).substr(0, p)));
  }
  if (name == "join") {
    PDSERVE_ASSIGN_OR_RETURN(auto a, bind({"iterable"}));
    if (!a[0].has_value()) return TypeError("join() takes one argument");
    PDSERVE_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(*a[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return TypeError(absl::StrCat("sequence item ", i, ": expected str instance, ",
                                      items[i].TypeName(), " found"));
      }
      if (i) out += s;
      out += items[i].as_string();
    }
    return Value::String(std::move(out));
  }
  if (name == "format") return StrFormat(s, args);
  if (name == "removeprefix" || name == "removesuffix") {
    PDSERVE_ASSIGN_OR_RETURN(auto a, bind({"affix"}));
    PDSERVE_ASSIGN_OR_RETURN(std::string x, StrArg(name, a[0]));
    absl::string_view v = s;
    if (name == "removeprefix" && v.substr(0, x.size()) == x) v.remove_prefix(x.size());
    if (name == "removesuffix" && x.size() <= v.size() &&
        v.substr(v.size() - x.size()) == x) {
      v.remove_suffix(x.size());
    }
    return Value::String(std::string(v));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" ||
      name == "isspace" || name == "islower" || name == "isupper") {
    std::vector<char32_t> cps = DecodeUtf8(s);
    bool cased = false, ok = !cps.empty();
    for (char32_t c : cps) {
      bool digit = c >= '0' && c <= '9';
      bool lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
      cased |= lower || upper;
      if (name == "isdigit") ok &= digit;
      if (name == "isalpha") ok &= lower || upper;
      if (name == "isalnum") ok &= lower || upper || digit;
      if (name == "isspace") ok &= IsPythonSpace(c);
      if (name == "islower") ok &= !upper;
      if (name == "isupper") ok &= !lower;
    }
    if (name == "islower" || name == "isupper") ok = ok && cased;
    return Value::Bool(ok);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("AttributeError: 'str' object has no method '", name, "'"));
}

absl::StatusOr<Value> DictMethod(const ValueDict& d, absl::string_view name,
                                 const CallArgs& args) {
  PDSERVE_ASSIGN_OR_RETURN(
      auto a, BindArgs(absl::StrCat("dict.", name), args,
                       name == "get" ? std::vector<std::string>{"key", "default"}
                                     : std::vector<std::string>{}));
  if (name == "get") {
    if (!a[0].has_value()) return TypeError("get() expected at least 1 argument");
    const Value* v = a[0]->is_string() ? d.Find(a[0]->as_string()) : nullptr;
    if (v != nullptr) return *v;
    return a[1].has_value() ? *a[1] : Value::None();
  }
  std::vector<Value> items;
  for (const auto& [k, v] : d.items()) {
    if (name == "keys") items.push_back(Value::String(k));
    else if (name == "values") items.push_back(v);
    else items.push_back(Value::List({Value::String(k), v}, /*tuple=*/true));
  }
  if (name == "keys" || name == "values" || name == "items") {
    return Value::List(std::move(items));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "SecurityError: dict method '", name,
      "' is not available (templates cannot modify or use it)"));
}

absl::StatusOr<Value> ListMethod(const ValueList& l, absl::string_view name,
                                 const CallArgs& args) {
  if (name == "index" || name == "count") {
    PDSERVE_ASSIGN_OR_RETURN(auto a, BindArgs(absl::StrCat("list.", name), args, {"value"}));
    if (!a[0].has_value()) return TypeError(absl::StrCat(name, "() takes one argument"));
    int64_t count = 0;
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (l.items[i].Equals(*a[0])) {
        if (name == "index") return Value::Int(static_cast<int64_t>(i));
        ++count;
      }
    }
    if (name == "index") return absl::InvalidArgumentError("ValueError: value is not in list");
    return Value::Int(count);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "SecurityError: list method '", name,
      "' is not available (templates cannot modify lists)"));
}

}  // namespace

absl::StatusOr<std::vector<std::optional<Value>>> BindArgs(
    absl::string_view function, const CallArgs& args,
    const std::vector<std::string>& params) {
  if (args.positional.size() > params.size()) {
    return TypeError(absl::StrCat(function, "() takes at most ", params.size(),
                                  " arguments (", args.positional.size(), " given)"));
  }
  std::vector<std::optional<Value>> out(params.size());
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (const auto& [k, v] : args.kwargs) {
    auto it = std::find(params.begin(), params.end(), k);
    if (it == params.end()) {
      return TypeError(absl::StrCat(function, "() got an unexpected keyword argument '",
                                    k, "'"));
    }
    size_t idx = it - params.begin();
    if (out[idx].has_value()) {
      return TypeError(absl::StrCat(function, "() got multiple values for '", k, "'"));
    }
    out[idx] = v;
  }
  return out;
}

bool IsKnownMethod(absl::string_view name) {
  static const auto* kMethods = new absl::flat_hash_set<std::string>{
      "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit",
      "splitlines", "replace", "lower", "upper", "title", "capitalize", "find",
      "rfind", "count", "index", "join", "format", "removeprefix",
      "removesuffix", "isdigit", "isalpha", "isalnum", "isspace", "islower",
      "isupper", "get", "items", "keys", "values"};
  return kMethods->contains(name);
}

absl::Status UndefinedError(const Value& undefined) {
  const std::string& hint = undefined.undefined_hint();
  return absl::InvalidArgumentError(absl::StrCat(
      "UndefinedError: ", hint.empty() ? "value is undefined" : hint));
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return std::vector<Value>();
    case Value::Kind::kList: return v.as_list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& kv : v.as_dict().items()) keys.push_back(Value::String(kv.first));
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      std::string buf;
      for (char32_t cp : DecodeUtf8(v.as_string())) {
        buf.clear();
        AppendUtf8(cp, &buf);
        chars.push_back(Value::String(buf));
      }
      return chars;
    }
    default:
      return TypeError(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

absl::StatusOr<Value> GetAttr(const Value& obj, absl::string_view name) {
  if (obj.is_undefined()) return UndefinedError(obj);
  const Value* found = nullptr;
  if (obj.kind() == Value::Kind::kDict) found = obj.as_dict().Find(name);
  if (obj.kind() == Value::Kind::kNamespace) found = obj.namespace_dict().Find(name);
  if (found != nullptr) return *found;
  return Value::Undefined(
      absl::StrCat("'", obj.TypeName(), " object' has no attribute '", name, "'"));
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  auto missing = [&]() {
    return Value::Undefined(absl::StrCat("'", obj.TypeName(),
                                         " object' has no element ", key.Repr()));
  };
  if (obj.kind() == Value::Kind::kDict || obj.kind() == Value::Kind::kNamespace) {
    if (!key.is_string()) return missing();
    return GetAttr(obj, key.as_string());
  }
  bool int_key = key.kind() == Value::Kind::kInt || key.kind() == Value::Kind::kBool;
  if (!int_key) {
    if (key.is_string()) return GetAttr(obj, key.as_string());
    return missing();
  }
  int64_t i = key.kind() == Value::Kind::kInt ? key.as_int() : key.as_bool();
  if (obj.kind() == Value::Kind::kList) {
    const auto& items = obj.as_list().items;
    int64_t n = static_cast<int64_t>(items.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return missing();
    return items[i];
  }
  if (obj.is_string()) {
    std::vector<char32_t> cps = DecodeUtf8(obj.as_string());
    int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return missing();
    std::string out;
    AppendUtf8(cps[i], &out);
    return Value::String(std::move(out));
  }
  return missing();
}

absl::StatusOr<bool> Contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!needle.is_string()) {
        return TypeError(absl::StrCat("'in <string>' requires string as left operand, not ",
                                      needle.TypeName()));
      }
      return haystack.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : haystack.as_list().items) {
        if (v.Equals(needle)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return needle.is_string() && haystack.as_dict().Find(needle.as_string()) != nullptr;
    case Value::Kind::kNamespace:
      return needle.is_string() &&
             haystack.namespace_dict().Find(needle.as_string()) != nullptr;
    default:
      return TypeError(absl::StrCat("argument of type '", haystack.TypeName(),
                                    "' is not iterable"));
  }
}

absl::StatusOr<int> Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat) {
      int64_t x = a.kind() == Value::Kind::kBool ? a.as_bool() : a.as_int();
      int64_t y = b.kind() == Value::Kind::kBool ? b.as_bool() : b.as_int();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    double x = a.ToDouble(), y = b.ToDouble();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.kind() == Value::Kind::kList && b.kind() == Value::Kind::kList) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i].Equals(y[i])) continue;
      return Compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  return TypeError(absl::StrCat("'<' not supported between instances of '",
                                a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::StatusOr<Value> CallMethod(const Value& obj, absl::string_view name,
                                 const CallArgs& args) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: return UndefinedError(obj);
    case Value::Kind::kString: return StringMethod(obj.as_string(), name, args);
    case Value::Kind::kDict: return DictMethod(obj.as_dict(), name, args);
    case Value::Kind::kList: return ListMethod(obj.as_list(), name, args);
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "AttributeError: '", obj.TypeName(), "' object has no method '", name, "'"));
  }
}

}  // namespace pdserve::jinja
