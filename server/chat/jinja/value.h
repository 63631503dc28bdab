// Values of the Jinja subset interpreter: a small tagged variant that behaves
// like the Python objects a chat template sees (str, int, float, bool, None,
// list/tuple, dict, jinja2 Undefined, namespace(), macros).
#ifndef PDSERVE_SERVER_CHAT_JINJA_VALUE_H_
#define PDSERVE_SERVER_CHAT_JINJA_VALUE_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace pdserve::jinja {

class Value;
struct MacroDef;  // defined by the parser (ast.h); owned by the Template.

// A Python list or tuple. `tuple` only changes how it prints.
struct ValueList {
  std::vector<Value> items;
  bool tuple = false;
  int depth = 1;  // container nesting depth (set by Value::List)
};

// A Python dict with string keys, kept in insertion order. Not thread-safe
// for writes; values shared between renders are never written.
class ValueDict {
 public:
  const Value* Find(absl::string_view key) const;
  // Inserts, or overwrites in place keeping the key's position.
  void Set(std::string key, Value value);
  // Drops every item (depth is kept). Used to break reference cycles through
  // namespaces when a render ends.
  void Clear();
  const std::vector<std::pair<std::string, Value>>& items() const {
    return items_;
  }
  size_t size() const;  // defined below, once Value is complete
  // Container nesting depth: 1 + the deepest value ever stored.
  int depth() const { return depth_; }

 private:
  std::vector<std::pair<std::string, Value>> items_;
  int depth_ = 1;
  absl::flat_hash_map<std::string, size_t> index_;
};

// jinja2.Undefined: falsy, renders empty, iterates as empty; attribute or
// item access on it is an error. `hint` names what was missing.
struct UndefinedValue {
  std::string hint;
};
struct NoneValue {};
// namespace(): a mutable dict whose attributes `{% set ns.x = ... %}` writes.
struct NamespaceRef {
  std::shared_ptr<ValueDict> dict;
};
// A callable: a template macro (def set) or a built-in global function
// (builtin names it, e.g. "raise_exception"; a static string).
struct MacroRef {
  const MacroDef* def;
  const char* builtin;
};

// Copying a Value is cheap for containers (shared, immutable by convention
// except namespaces) and copies strings. Thread-compatible.
class Value {
 public:
  enum class Kind {
    kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict,
    kNamespace, kMacro
  };

  Value() : v_(UndefinedValue{}) {}
  static Value Undefined(std::string hint = "");
  static Value None() { return Value(NoneValue{}); }
  static Value Bool(bool b) { return Value(b); }
  static Value Int(int64_t i) { return Value(i); }
  static Value Float(double d) { return Value(d); }
  static Value String(std::string s) { return Value(std::move(s)); }
  static Value List(std::vector<Value> items, bool tuple = false);
  static Value Dict(ValueDict dict);
  static Value Namespace(ValueDict dict);
  static Value Macro(const MacroDef* def) { return Value(MacroRef{def, nullptr}); }
  static Value Builtin(const char* name) { return Value(MacroRef{nullptr, name}); }
  // JSON -> Value; objects keep the key order of the json type's storage
  // (use nlohmann::ordered_json to keep the client's order, which tojson
  // reproduces). Nesting deeper than `max_depth` is an InvalidArgument error.
  template <typename Json>
  static absl::StatusOr<Value> FromJson(const Json& json, int max_depth = 128);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_number() const {
    return kind() == Kind::kInt || kind() == Kind::kFloat ||
           kind() == Kind::kBool;
  }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  // Int, float or bool as a double.
  double ToDouble() const;
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const ValueList& as_list() const { return *std::get<ListPtr>(v_); }
  const ValueDict& as_dict() const { return *std::get<DictPtr>(v_); }
  ValueDict& namespace_dict() const {
    return *std::get<NamespaceRef>(v_).dict;
  }
  // A non-owning handle on a namespace's dict (for its creator to clear it).
  std::weak_ptr<ValueDict> namespace_weak() const {
    return std::get<NamespaceRef>(v_).dict;
  }
  // Null for built-in functions.
  const MacroDef* as_macro() const { return std::get<MacroRef>(v_).def; }
  const char* builtin_name() const { return std::get<MacroRef>(v_).builtin; }
  const std::string& undefined_hint() const {
    return std::get<UndefinedValue>(v_).hint;
  }

  // Python truthiness (Undefined is false).
  bool Truthy() const;
  // Python str(): what `{{ x }}` renders (Undefined renders "").
  std::string Str() const;
  // Python repr() (used for items inside printed containers).
  std::string Repr() const { return ReprAt(0); }
  // Nesting depth of containers (0 for scalars); O(1).
  int Depth() const;
  // Python ==, with jinja2's rule that two Undefined compare equal.
  bool Equals(const Value& other) const;
  // The Python type name for error messages ("str", "dict", "undefined").
  std::string TypeName() const;

 private:
  using ListPtr = std::shared_ptr<const ValueList>;
  using DictPtr = std::shared_ptr<const ValueDict>;
  template <typename T>
  explicit Value(T v) : v_(std::move(v)) {}
  // Repr with a recursion guard (namespaces can contain themselves).
  std::string ReprAt(int level) const;

  std::variant<UndefinedValue, NoneValue, bool, int64_t, double, std::string,
               ListPtr, DictPtr, NamespaceRef, MacroRef>
      v_;
};

inline size_t ValueDict::size() const { return items_.size(); }

template <typename Json>
absl::StatusOr<Value> Value::FromJson(const Json& json, int max_depth) {
  if (max_depth < 0) {
    return absl::InvalidArgumentError(
        "JSON value nested too deeply for the chat template (limit 128)");
  }
  if (json.is_null()) return None();
  if (json.is_boolean()) return Bool(json.template get<bool>());
  if (json.is_number_unsigned()) {
    uint64_t u = json.template get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Float(double(u));
    return Int(static_cast<int64_t>(u));
  }
  if (json.is_number_integer()) return Int(json.template get<int64_t>());
  if (json.is_number_float()) return Float(json.template get<double>());
  if (json.is_string()) return String(json.template get<std::string>());
  if (json.is_array()) {
    std::vector<Value> items;
    items.reserve(json.size());
    for (const auto& item : json) {
      absl::StatusOr<Value> v = FromJson(item, max_depth - 1);
      if (!v.ok()) return v.status();
      items.push_back(*std::move(v));
    }
    return List(std::move(items));
  }
  if (json.is_object()) {
    ValueDict dict;
    for (auto it = json.begin(); it != json.end(); ++it) {
      absl::StatusOr<Value> v = FromJson(it.value(), max_depth - 1);
      if (!v.ok()) return v.status();
      dict.Set(it.key(), *std::move(v));
    }
    return Dict(std::move(dict));
  }
  return absl::InvalidArgumentError(
      "binary JSON values are not supported in chat templates");
}

// Options of the `tojson` filter (Python json.dumps as transformers calls it).
struct JsonDumpOptions {
  int indent = -1;  // -1: no newlines
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// Python json.dumps(value) byte for byte for JSON-like values; Undefined,
// namespaces and macros are an error, as is nesting deeper than 256.
absl::StatusOr<std::string> DumpJson(const Value& value,
                                     const JsonDumpOptions& options);

// Python repr() of a float ("1.0", "1e+20", "nan", "inf").
std::string FormatPythonFloat(double d);

}  // namespace pdserve::jinja

#endif  // PDSERVE_SERVER_CHAT_JINJA_VALUE_H_
