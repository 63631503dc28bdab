#include "server/chat/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/chat/jinja/text.h"

namespace pdserve::jinja {

const Value* ValueDict::Find(absl::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

void ValueDict::Set(std::string key, Value value) {
  depth_ = std::max(depth_, 1 + value.Depth());
  auto it = index_.find(key);
  if (it != index_.end()) {
    items_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, items_.size());
  items_.emplace_back(std::move(key), std::move(value));
}

void ValueDict::Clear() {
  // Moved out first: destroying an item may free other dicts, never this one
  // (the caller holds it), but items_ must be consistent while that runs.
  std::vector<std::pair<std::string, Value>> doomed = std::move(items_);
  items_.clear();
  index_.clear();
}

Value Value::Undefined(std::string hint) {
  return Value(UndefinedValue{std::move(hint)});
}

Value Value::List(std::vector<Value> items, bool tuple) {
  auto list = std::make_shared<ValueList>();
  list->items = std::move(items);
  list->tuple = tuple;
  for (const Value& v : list->items) list->depth = std::max(list->depth, 1 + v.Depth());
  return Value(ListPtr(std::move(list)));
}

Value Value::Dict(ValueDict dict) {
  return Value(DictPtr(std::make_shared<const ValueDict>(std::move(dict))));
}

Value Value::Namespace(ValueDict dict) {
  return Value(NamespaceRef{std::make_shared<ValueDict>(std::move(dict))});
}

int Value::Depth() const {
  switch (kind()) {
    case Kind::kList: return as_list().depth;
    case Kind::kDict: return as_dict().depth();
    case Kind::kNamespace: return namespace_dict().depth();
    default: return 0;
  }
}

double Value::ToDouble() const {
  switch (kind()) {
    case Kind::kInt: return static_cast<double>(as_int());
    case Kind::kFloat: return as_float();
    case Kind::kBool: return as_bool() ? 1.0 : 0.0;
    default: return 0.0;
  }
}

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined: case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_float() != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !as_list().items.empty();
    case Kind::kDict: return as_dict().size() != 0;
    case Kind::kNamespace: case Kind::kMacro: return true;
  }
  return false;
}

std::string FormatPythonFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d,
                           std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exp10 = std::atoi(sci.c_str() + e + 1);
  int decpt = exp10 + 1;  // digits d1 d2 ... with the point after decpt
  std::string out = neg ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= static_cast<int>(digits.size())) {
      out += digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += absl::StrFormat("e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  }
  return out;
}

std::string Value::Str() const {
  switch (kind()) {
    case Kind::kUndefined: return "";
    case Kind::kString: return as_string();
    default: return Repr();
  }
}

std::string Value::ReprAt(int level) const {
  if (level > 300) return "...";
  switch (kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "None";
    case Kind::kBool: return as_bool() ? "True" : "False";
    case Kind::kInt: return absl::StrCat(as_int());
    case Kind::kFloat: return FormatPythonFloat(as_float());
    case Kind::kString: return PyReprString(as_string());
    case Kind::kList: {
      const ValueList& l = as_list();
      std::string out = l.tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += l.items[i].ReprAt(level + 1);
      }
      if (l.tuple && l.items.size() == 1) out += ",";
      return out + (l.tuple ? ")" : "]");
    }
    case Kind::kDict: case Kind::kNamespace: {
      const ValueDict& d =
          kind() == Kind::kDict ? as_dict() : namespace_dict();
      std::string out = kind() == Kind::kDict ? "{" : "<Namespace {";
      bool first = true;
      for (const auto& [k, v] : d.items()) {
        if (!first) out += ", ";
        first = false;
        out += PyReprString(k) + ": " + v.ReprAt(level + 1);
      }
      return out + (kind() == Kind::kDict ? "}" : "}>");
    }
    case Kind::kMacro:
      return builtin_name() != nullptr
                 ? absl::StrCat("<built-in function ", builtin_name(), ">")
                 : "<Macro>";
  }
  return "";
}

bool Value::Equals(const Value& other) const {
  Kind a = kind(), b = other.kind();
  if (is_number() && other.is_number()) {
    if (a == Kind::kFloat || b == Kind::kFloat) {
      return ToDouble() == other.ToDouble();
    }
    int64_t x = a == Kind::kBool ? as_bool() : as_int();
    int64_t y = b == Kind::kBool ? other.as_bool() : other.as_int();
    return x == y;
  }
  if (a != b) return false;
  switch (a) {
    case Kind::kUndefined: case Kind::kNone: return true;
    case Kind::kString: return as_string() == other.as_string();
    case Kind::kList: {
      const ValueList& x = as_list();
      const ValueList& y = other.as_list();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!x.items[i].Equals(y.items[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const ValueDict& x = as_dict();
      const ValueDict& y = other.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.items()) {
        const Value* w = y.Find(k);
        if (w == nullptr || !v.Equals(*w)) return false;
      }
      return true;
    }
    case Kind::kNamespace:
      return &namespace_dict() == &other.namespace_dict();
    case Kind::kMacro:
      return as_macro() == other.as_macro() && builtin_name() == other.builtin_name();
    default: return false;
  }
}

std::string Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return as_list().tuple ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kMacro: return "Macro";
  }
  return "?";
}

namespace {

void DumpJsonString(absl::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (char32_t cp : DecodeUtf8(s)) {
    switch (cp) {
      case '"': *out += "\\\""; continue;
      case '\\': *out += "\\\\"; continue;
      case '\n': *out += "\\n"; continue;
      case '\r': *out += "\\r"; continue;
      case '\t': *out += "\\t"; continue;
      case '\b': *out += "\\b"; continue;
      case '\f': *out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20) {
      *out += absl::StrFormat("\\u%04x", static_cast<unsigned>(cp));
    } else if (ensure_ascii && cp >= 0x80) {
      if (cp >= 0x10000) {
        char32_t v = cp - 0x10000;
        *out += absl::StrFormat("\\u%04x\\u%04x", 0xD800 + (v >> 10),
                                0xDC00 + (v & 0x3FF));
      } else {
        *out += absl::StrFormat("\\u%04x", static_cast<unsigned>(cp));
      }
    } else {
      AppendUtf8(cp, out);
    }
  }
  out->push_back('"');
}

absl::Status DumpJsonTo(const Value& v, const JsonDumpOptions& o, int depth,
                        std::string* out) {
  if (depth > 256) {
    return absl::InvalidArgumentError("tojson: value nested deeper than 256");
  }
  auto newline = [&](int level) {
    if (o.indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(o.indent) * level, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone: *out += "null"; return absl::OkStatus();
    case Value::Kind::kBool:
      *out += v.as_bool() ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt: *out += absl::StrCat(v.as_int()); break;
    case Value::Kind::kFloat: {
      double d = v.as_float();
      if (std::isnan(d)) *out += "NaN";
      else if (std::isinf(d)) *out += d > 0 ? "Infinity" : "-Infinity";
      else *out += FormatPythonFloat(d);
      break;
    }
    case Value::Kind::kString:
      DumpJsonString(v.as_string(), o.ensure_ascii, out);
      break;
    case Value::Kind::kList: {
      const auto& items = v.as_list().items;
      if (items.empty()) { *out += "[]"; break; }
      out->push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += o.item_separator;
        newline(depth + 1);
        absl::Status s = DumpJsonTo(items[i], o, depth + 1, out);
        if (!s.ok()) return s;
      }
      newline(depth);
      out->push_back(']');
      break;
    }
    case Value::Kind::kDict: {
      const auto& d = v.as_dict();
      if (d.size() == 0) { *out += "{}"; break; }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : d.items()) items.push_back(&kv);
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += o.item_separator;
        newline(depth + 1);
        DumpJsonString(items[i]->first, o.ensure_ascii, out);
        *out += o.key_separator;
        absl::Status s = DumpJsonTo(items[i]->second, o, depth + 1, out);
        if (!s.ok()) return s;
      }
      newline(depth);
      out->push_back('}');
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "tojson: object of type ", v.TypeName(), " is not JSON serializable"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> DumpJson(const Value& value,
                                     const JsonDumpOptions& options) {
  std::string out;
  absl::Status s = DumpJsonTo(value, options, 0, &out);
  if (!s.ok()) return s;
  return out;
}

}  // namespace pdserve::jinja
