// Filters and tests of the Jinja subset (jinja2 3.1 semantics; `tojson` is
// transformers' override: json.dumps with ensure_ascii=False).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/chat/jinja/builtins.h"
#include "common/status_macros.h"
#include "server/chat/jinja/text.h"

namespace pdserve::jinja {
namespace {

using Filter = std::function<absl::StatusOr<Value>(const Value&, const CallArgs&)>;
using Test = std::function<absl::StatusOr<bool>(const Value&, const CallArgs&)>;

bool IsInt(const Value& v) { return v.kind() == Value::Kind::kInt; }

// Filters that only take the input converted with str().
Filter StrFilter(std::function<std::string(const std::string&)> fn) {
  return [fn](const Value& in, const CallArgs& args) -> absl::StatusOr<Value> {
    PDSERVE_ASSIGN_OR_RETURN(auto a, BindArgs("filter", args, {}));
    (void)a;
    return Value::String(fn(in.Str()));
  };
}

// Dotted attribute lookup used by selectattr/map/sort (environment.getitem).
absl::StatusOr<Value> AttrPath(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos
                                                                   : dot - start);
    int64_t idx;
    if (absl::SimpleAtoi(part, &idx)) {
      PDSERVE_ASSIGN_OR_RETURN(cur, GetItem(cur, Value::Int(idx)));
    } else {
      PDSERVE_ASSIGN_OR_RETURN(cur, GetItem(cur, Value::String(part)));
    }
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

absl::StatusOr<Value> Length(const Value& in) {
  switch (in.kind()) {
    case Value::Kind::kUndefined: return Value::Int(0);
    case Value::Kind::kString: return Value::Int(CodePointLength(in.as_string()));
    case Value::Kind::kList: return Value::Int(static_cast<int64_t>(in.as_list().items.size()));
    case Value::Kind::kDict: return Value::Int(static_cast<int64_t>(in.as_dict().size()));
    default:
      return TypeError(absl::StrCat("object of type '", in.TypeName(), "' has no len()"));
  }
}

absl::StatusOr<Value> ToJson(const Value& in, const CallArgs& args) {
  PDSERVE_ASSIGN_OR_RETURN(auto a, BindArgs("tojson", args,
                                        {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonDumpOptions o;
  if (a[0].has_value()) o.ensure_ascii = a[0]->Truthy();
  if (a[1].has_value() && !a[1]->is_none()) {
    if (!IsInt(*a[1])) return TypeError("tojson indent must be an int");
    o.indent = static_cast<int>(std::clamp<int64_t>(a[1]->as_int(), 0, 64));
    o.item_separator = ",";
  }
  if (a[2].has_value() && !a[2]->is_none()) {
    const Value& s = *a[2];
    if (s.kind() != Value::Kind::kList || s.as_list().items.size() != 2 ||
        !s.as_list().items[0].is_string() || !s.as_list().items[1].is_string()) {
      return TypeError("tojson separators must be a pair of strings");
    }
    o.item_separator = s.as_list().items[0].as_string();
    o.key_separator = s.as_list().items[1].as_string();
  }
  if (a[3].has_value()) o.sort_keys = a[3]->Truthy();
  PDSERVE_ASSIGN_OR_RETURN(std::string json, DumpJson(in, o));
  return Value::String(std::move(json));
}

absl::StatusOr<Value> Join(const Value& in, const CallArgs& args) {
  PDSERVE_ASSIGN_OR_RETURN(auto a, BindArgs("join", args, {"d", "attribute"}));
  std::string sep = a[0].has_value() ? a[0]->Str() : "";
  PDSERVE_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (a[1].has_value() && !a[1]->is_none()) {
      PDSERVE_ASSIGN_OR_RETURN(item, AttrPath(item, a[1]->Str()));
    }
    if (i) out += sep;
    out += item.Str();
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Default(const Value& in, const CallArgs& args) {
  PDSERVE_ASSIGN_OR_RETURN(auto a, BindArgs("default", args, {"default_value", "boolean"}));
  bool boolean = a[1].has_value() && a[1]->Truthy();
  if (in.is_undefined() || (boolean && !in.Truthy())) {
    return a[0].has_value() ? *a[0] : Value::String("");
  }
  return in;
}

absl::StatusOr<Value> Items(const Value& in, const CallArgs& args) {
  if (in.is_undefined()) return Value::List({});
  if (in.kind() != Value::Kind::kDict) {
    return TypeError(absl::StrCat("items filter needs a mapping, got ", in.TypeName()));
  }
  return CallMethod(in, "items", args);
}

absl::StatusOr<Value> FirstLast(const Value& in, bool first) {
  PDSERVE_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return first ? items.front() : items.back();
}

// select / reject / selectattr / rejectattr.
absl::StatusOr<Value> Select(const Value& in, const CallArgs& args, bool attr,
                             bool keep) {
  PDSERVE_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  size_t next = 0;
  std::string attribute;
  if (attr) {
    if (args.positional.empty() || !args.positional[0].is_string()) {
      return TypeError("selectattr/rejectattr need an attribute name");
    }
    attribute = args.positional[next++].as_string();
  }
  std::string test;
  CallArgs test_args;
  if (next < args.positional.size()) {
    test = args.positional[next++].Str();
    test_args.positional.assign(args.positional.begin() + next, args.positional.end());
    test_args.kwargs = args.kwargs;
    if (!IsKnownTest(test)) return TypeError(absl::StrCat("no test named '", test, "'"));
  }
  std::vector<Value> out;
  for (const Value& item : items) {
    Value v = item;
    if (attr) {
      PDSERVE_ASSIGN_OR_RETURN(v, AttrPath(item, attribute));
    }
    bool pass;
    if (test.empty()) {
      pass = v.Truthy();
    } else {
      PDSERVE_ASSIGN_OR_RETURN(pass, ApplyTest(test, v, test_args));
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Map(const Value& in, const CallArgs& args) {
  PDSERVE_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  std::vector<Value> out;
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& [k, v] : args.kwargs) {
    if (k == "attribute") attribute = &v;
    else if (k == "default") dflt = &v;
  }
  if (attribute != nullptr) {
    for (const Value& item : items) {
      PDSERVE_ASSIGN_OR_RETURN(Value v, AttrPath(item, attribute->Str()));
      out.push_back(v.is_undefined() && dflt != nullptr ? *dflt : v);
    }
    return Value::List(std::move(out));
  }
  if (args.positional.empty()) return TypeError("map needs a filter name or attribute=");
  std::string filter = args.positional[0].Str();
  if (!IsKnownFilter(filter)) return TypeError(absl::StrCat("no filter named '", filter, "'"));
  CallArgs fargs;
  fargs.positional.assign(args.positional.begin() + 1, args.positional.end());
  fargs.kwargs = args.kwargs;
  for (const Value& item : items) {
    PDSERVE_ASSIGN_OR_RETURN(Value v, ApplyFilter(filter, item, fargs));
    out.push_back(std::move(v));
  }
  return Value::List(std::move(out));
}

// Sort key: case-insensitive strings unless case_sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (v.is_string() && !case_sensitive) return Value::String(AsciiLower(v.as_string()));
  return v;
}

absl::StatusOr<Value> Sort(const Value& in, const CallArgs& args) {
  PDSERVE_ASSIGN_OR_RETURN(auto a, BindArgs("sort", args, {"reverse", "case_sensitive", "attribute"}));
  bool reverse = a[0].has_value() && a[0]->Truthy();
  bool cs = a[1].has_value() && a[1]->Truthy();
  PDSERVE_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) {
    Value k = item;
    if (a[2].has_value() && !a[2]->is_none()) {
      PDSERVE_ASSIGN_OR_RETURN(k, AttrPath(item, a[2]->Str()));
    }
    keyed.emplace_back(SortKey(k, cs), item);
  }
  absl::Status err;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    absl::StatusOr<int> c = reverse ? Compare(y.first, x.first) : Compare(x.first, y.first);
    if (!c.ok()) {
      err = c.status();
      return false;
    }
    return *c < 0;
  });
  PDSERVE_RETURN_IF_ERROR(err);
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Unique(const Value& in, const CallArgs& args) {
  PDSERVE_ASSIGN_OR_RETURN(auto a, BindArgs("unique", args, {"case_sensitive", "attribute"}));
  bool cs = a[0].has_value() && a[0]->Truthy();
  PDSERVE_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  std::vector<Value> out, seen;
  for (const Value& item : items) {
    Value k = item;
    if (a[1].has_value() && !a[1]->is_none()) {
      PDSERVE_ASSIGN_OR_RETURN(k, AttrPath(item, a[1]->Str()));
    }
    k = SortKey(k, cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return s.Equals(k); })) continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> MinMax(const Value& in, const CallArgs& args, bool max) {
  PDSERVE_ASSIGN_OR_RETURN(auto a, BindArgs(max ? "max" : "min", args, {"case_sensitive", "attribute"}));
  bool cs = a[0].has_value() && a[0]->Truthy();
  PDSERVE_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  const Value* best = nullptr;
  Value best_key;
  for (const Value& item : items) {
    Value k = item;
    if (a[1].has_value() && !a[1]->is_none()) {
      PDSERVE_ASSIGN_OR_RETURN(k, AttrPath(item, a[1]->Str()));
    }
    k = SortKey(k, cs);
    if (best != nullptr) {
      PDSERVE_ASSIGN_OR_RETURN(int c, Compare(k, best_key));
      if (max ? c <= 0 : c >= 0) continue;
    }
    best = &item;
    best_key = k;
  }
  return *best;
}

absl::StatusOr<Value> Sum(const Value& in, const CallArgs& args) {
  PDSERVE_ASSIGN_OR_RETURN(auto a, BindArgs("sum", args, {"attribute", "start"}));
  PDSERVE_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  Value acc = a[1].has_value() ? *a[1] : Value::Int(0);
  for (const Value& item : items) {
    Value v = item;
    if (a[0].has_value() && !a[0]->is_none()) {
      PDSERVE_ASSIGN_OR_RETURN(v, AttrPath(item, a[0]->Str()));
    }
    if (!acc.is_number() || !v.is_number()) {
      return TypeError(absl::StrCat("unsupported operand type(s) for +: '", acc.TypeName(),
                                    "' and '", v.TypeName(), "'"));
    }
    if (acc.kind() == Value::Kind::kFloat || v.kind() == Value::Kind::kFloat) {
      acc = Value::Float(acc.ToDouble() + v.ToDouble());
    } else {
      acc = Value::Int(static_cast<int64_t>(acc.ToDouble()) + static_cast<int64_t>(v.ToDouble()));
    }
  }
  return acc;
}

absl::StatusOr<Value> ToInt(const Value& in, const CallArgs& args) {
  PDSERVE_ASSIGN_OR_RETURN(auto a, BindArgs("int", args, {"default", "base"}));
  Value dflt = a[0].has_value() ? *a[0] : Value::Int(0);
  if (in.kind() == Value::Kind::kInt) return in;
  if (in.kind() == Value::Kind::kBool) return Value::Int(in.as_bool());
  if (in.kind() == Value::Kind::kFloat) {
    if (!std::isfinite(in.as_float())) return dflt;
    return Value::Int(static_cast<int64_t>(in.as_float()));
  }
  if (in.is_string()) {
    std::string s = PyStrip(in.as_string(), std::nullopt, true, true);
    int64_t i;
    double d;
    if (absl::SimpleAtoi(s, &i)) return Value::Int(i);
    if (absl::SimpleAtod(s, &d) && std::isfinite(d)) return Value::Int(static_cast<int64_t>(d));
  }
  return dflt;
}

absl::StatusOr<Value> ToFloat(const Value& in, const CallArgs& args) {
  PDSERVE_ASSIGN_OR_RETURN(auto a, BindArgs("float", args, {"default"}));
  if (in.is_number()) return Value::Float(in.ToDouble());
  double d;
  if (in.is_string() && absl::SimpleAtod(in.as_string(), &d)) return Value::Float(d);
  return a[0].has_value() ? *a[0] : Value::Float(0.0);
}

absl::StatusOr<Value> Indent(const Value& in, const CallArgs& args) {
  PDSERVE_ASSIGN_OR_RETURN(auto a, BindArgs("indent", args, {"width", "first", "blank"}));
  std::string ind = "    ";
  if (a[0].has_value()) {
    ind = a[0]->is_string() ? a[0]->as_string()
                            : std::string(std::clamp<int64_t>(
                                  IsInt(*a[0]) ? a[0]->as_int() : 4, 0, 1024), ' ');
  }
  bool first = a[1].has_value() && a[1]->Truthy();
  bool blank = a[2].has_value() && a[2]->Truthy();
  std::vector<std::string> lines = PySplit(in.Str() + "\n", std::string("\n"), -1);
  lines.pop_back();  // the "\n" appended above
  std::string out = lines.empty() ? "" : lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    out += "\n";
    if (blank || !lines[i].empty()) out += ind;
    out += lines[i];
  }
  if (first) out.insert(0, ind);
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Round(const Value& in, const CallArgs& args) {
  PDSERVE_ASSIGN_OR_RETURN(auto a, BindArgs("round", args, {"precision", "method"}));
  if (!in.is_number()) return TypeError("round needs a number");
  int64_t precision = a[0].has_value() && IsInt(*a[0]) ? a[0]->as_int() : 0;
  std::string method = a[1].has_value() ? a[1]->Str() : "common";
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = in.ToDouble() * scale;
  double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x)
                                                                 : std::nearbyint(x);  // half to even, like Python round()
  return Value::Float(r / scale);
}

absl::StatusOr<Value> Replace(const Value& in, const CallArgs& args) {
  PDSERVE_ASSIGN_OR_RETURN(auto a, BindArgs("replace", args, {"old", "new", "count"}));
  if (!a[0].has_value() || !a[1].has_value()) return TypeError("replace needs old and new");
  int64_t count = a[2].has_value() && IsInt(*a[2]) ? a[2]->as_int() : -1;
  return Value::String(PyReplace(in.Str(), a[0]->Str(), a[1]->Str(), count));
}

absl::StatusOr<Value> Reverse(const Value& in) {
  if (in.is_string()) {
    std::vector<char32_t> cps = DecodeUtf8(in.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value::String(EncodeUtf8(cps));
  }
  PDSERVE_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in));
  std::reverse(items.begin(), items.end());
  return Value::List(std::move(items));
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

const absl::flat_hash_map<std::string, Filter>& Filters() {
  static const auto* kFilters = new absl::flat_hash_map<std::string, Filter>{
      {"length", [](const Value& v, const CallArgs&) { return Length(v); }},
      {"count", [](const Value& v, const CallArgs&) { return Length(v); }},
      {"tojson", ToJson},
      {"join", Join},
      {"default", Default},
      {"d", Default},
      {"items", Items},
      {"first", [](const Value& v, const CallArgs&) { return FirstLast(v, true); }},
      {"last", [](const Value& v, const CallArgs&) { return FirstLast(v, false); }},
      {"list", [](const Value& v, const CallArgs&) -> absl::StatusOr<Value> {
         PDSERVE_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
         return Value::List(std::move(items));
       }},
      {"string", [](const Value& v, const CallArgs&) { return absl::StatusOr<Value>(Value::String(v.Str())); }},
      {"trim", [](const Value& v, const CallArgs& args) -> absl::StatusOr<Value> {
         PDSERVE_ASSIGN_OR_RETURN(auto a, BindArgs("trim", args, {"chars"}));
         std::optional<std::string> chars;
         if (a[0].has_value() && !a[0]->is_none()) chars = a[0]->Str();
         return Value::String(PyStrip(v.Str(), chars, true, true));
       }},
      {"upper", StrFilter(AsciiUpper)},
      {"lower", StrFilter(AsciiLower)},
      {"title", StrFilter(PyTitle)},
      {"capitalize", StrFilter(PyCapitalize)},
      {"escape", StrFilter(HtmlEscape)},
      {"e", StrFilter(HtmlEscape)},
      {"safe", [](const Value& v, const CallArgs&) { return absl::StatusOr<Value>(v); }},
      {"replace", Replace},
      {"select", [](const Value& v, const CallArgs& a) { return Select(v, a, false, true); }},
      {"reject", [](const Value& v, const CallArgs& a) { return Select(v, a, false, false); }},
      {"selectattr", [](const Value& v, const CallArgs& a) { return Select(v, a, true, true); }},
      {"rejectattr", [](const Value& v, const CallArgs& a) { return Select(v, a, true, false); }},
      {"map", Map},
      {"sort", Sort},
      {"unique", Unique},
      {"max", [](const Value& v, const CallArgs& a) { return MinMax(v, a, true); }},
      {"min", [](const Value& v, const CallArgs& a) { return MinMax(v, a, false); }},
      {"sum", Sum},
      {"int", ToInt},
      {"float", ToFloat},
      {"abs", [](const Value& v, const CallArgs&) -> absl::StatusOr<Value> {
         if (IsInt(v)) return Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
         if (v.is_number()) return Value::Float(std::fabs(v.ToDouble()));
         return TypeError(absl::StrCat("bad operand type for abs(): '", v.TypeName(), "'"));
       }},
      {"round", Round},
      {"indent", Indent},
      {"reverse", [](const Value& v, const CallArgs&) { return Reverse(v); }},
  };
  return *kFilters;
}

absl::StatusOr<Value> OneArg(absl::string_view test, const CallArgs& args) {
  if (args.positional.size() != 1 || !args.kwargs.empty()) {
    return TypeError(absl::StrCat("test '", test, "' takes exactly one argument"));
  }
  return args.positional[0];
}

Test CompareTest(std::function<bool(int)> pred, const char* name) {
  return [pred, name](const Value& v, const CallArgs& args) -> absl::StatusOr<bool> {
    PDSERVE_ASSIGN_OR_RETURN(Value other, OneArg(name, args));
    PDSERVE_ASSIGN_OR_RETURN(int c, Compare(v, other));
    return pred(c);
  };
}

Test KindTest(std::function<bool(const Value&)> pred) {
  return [pred](const Value& v, const CallArgs& args) -> absl::StatusOr<bool> {
    if (!args.positional.empty() || !args.kwargs.empty()) {
      return TypeError("this test takes no arguments");
    }
    return pred(v);
  };
}

const absl::flat_hash_map<std::string, Test>& Tests() {
  using K = Value::Kind;
  static const auto* kTests = new absl::flat_hash_map<std::string, Test>{
      {"defined", KindTest([](const Value& v) { return !v.is_undefined(); })},
      {"undefined", KindTest([](const Value& v) { return v.is_undefined(); })},
      {"none", KindTest([](const Value& v) { return v.is_none(); })},
      {"boolean", KindTest([](const Value& v) { return v.kind() == K::kBool; })},
      {"true", KindTest([](const Value& v) { return v.kind() == K::kBool && v.as_bool(); })},
      {"false", KindTest([](const Value& v) { return v.kind() == K::kBool && !v.as_bool(); })},
      {"integer", KindTest([](const Value& v) { return v.kind() == K::kInt; })},
      {"float", KindTest([](const Value& v) { return v.kind() == K::kFloat; })},
      {"number", KindTest([](const Value& v) { return v.is_number(); })},
      {"string", KindTest([](const Value& v) { return v.is_string(); })},
      {"mapping", KindTest([](const Value& v) { return v.kind() == K::kDict; })},
      {"iterable", KindTest([](const Value& v) {
         return v.is_undefined() || v.is_string() || v.kind() == K::kList || v.kind() == K::kDict;
       })},
      {"sequence", KindTest([](const Value& v) {
         return v.is_undefined() || v.is_string() || v.kind() == K::kList || v.kind() == K::kDict;
       })},
      {"callable", KindTest([](const Value& v) { return v.kind() == K::kMacro; })},
      {"escaped", KindTest([](const Value&) { return false; })},
      {"lower", KindTest([](const Value& v) { return v.is_string() && AsciiLower(v.as_string()) == v.as_string(); })},
      {"upper", KindTest([](const Value& v) { return v.is_string() && AsciiUpper(v.as_string()) == v.as_string(); })},
      {"odd", KindTest([](const Value& v) { return v.kind() == K::kInt && v.as_int() % 2 != 0; })},
      {"even", KindTest([](const Value& v) { return v.kind() == K::kInt && v.as_int() % 2 == 0; })},
      {"divisibleby", [](const Value& v, const CallArgs& args) -> absl::StatusOr<bool> {
         PDSERVE_ASSIGN_OR_RETURN(Value n, OneArg("divisibleby", args));
         if (!IsInt(v) || !IsInt(n) || n.as_int() == 0) return TypeError("divisibleby needs nonzero ints");
         return v.as_int() % n.as_int() == 0;
       }},
      {"sameas", [](const Value& v, const CallArgs& args) -> absl::StatusOr<bool> {
         PDSERVE_ASSIGN_OR_RETURN(Value o, OneArg("sameas", args));
         if (v.kind() != o.kind()) return false;
         // Python `is`: identity; small ints, bools, None and (interned)
         // strings behave like equality, containers never share identity.
         if (v.kind() == K::kList || v.kind() == K::kDict) return false;
         return v.Equals(o);
       }},
      {"in", [](const Value& v, const CallArgs& args) -> absl::StatusOr<bool> {
         PDSERVE_ASSIGN_OR_RETURN(Value o, OneArg("in", args));
         return Contains(o, v);
       }},
      {"eq", CompareTest([](int c) { return c == 0; }, "eq")},
      {"equalto", CompareTest([](int c) { return c == 0; }, "equalto")},
      {"ne", CompareTest([](int c) { return c != 0; }, "ne")},
      {"lt", CompareTest([](int c) { return c < 0; }, "lt")},
      {"lessthan", CompareTest([](int c) { return c < 0; }, "lessthan")},
      {"le", CompareTest([](int c) { return c <= 0; }, "le")},
      {"gt", CompareTest([](int c) { return c > 0; }, "gt")},
      {"greaterthan", CompareTest([](int c) { return c > 0; }, "greaterthan")},
      {"ge", CompareTest([](int c) { return c >= 0; }, "ge")},
  };
  return *kTests;
}

}  // namespace

bool IsKnownFilter(absl::string_view name) { return Filters().contains(name); }
bool IsKnownTest(absl::string_view name) { return Tests().contains(name); }

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& input,
                                  const CallArgs& args) {
  auto it = Filters().find(name);
  if (it == Filters().end()) {
    return absl::InvalidArgumentError(absl::StrCat("no filter named '", name, "'"));
  }
  return it->second(input, args);
}

absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& input,
                               const CallArgs& args) {
  auto it = Tests().find(name);
  if (it == Tests().end()) {
    return absl::InvalidArgumentError(absl::StrCat("no test named '", name, "'"));
  }
  // eq/ne compare with ==, which works across all types.
  if (name == "eq" || name == "equalto" || name == "ne") {
    PDSERVE_ASSIGN_OR_RETURN(Value o, OneArg(name, args));
    return input.Equals(o) == (name != "ne");
  }
  return it->second(input, args);
}

absl::Status TypeError(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("TypeError: ", what));
}

}  // namespace pdserve::jinja
