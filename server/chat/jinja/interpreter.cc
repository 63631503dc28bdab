// Tree-walking renderer for parsed templates.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/chat/jinja/ast.h"
#include "server/chat/jinja/builtins.h"
#include "server/chat/jinja/lexer.h"
#include "server/chat/jinja/parser.h"
#include "common/status_macros.h"
#include "server/chat/jinja/template.h"
#include "server/chat/jinja/text.h"

namespace pdserve::jinja {

namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2 sandbox MAX_RANGE
// Values built while rendering stay shallow enough that printing, comparing
// and freeing them cannot exhaust the stack (JSON inputs are limited to 128).
constexpr int kMaxValueDepth = 200;

class Renderer {
 public:
  Renderer(const ParsedTemplate& t, const ValueDict& globals,
           const RenderOptions& options)
      : t_(t), globals_(globals), options_(options) {}
  // A namespace can hold itself (`{% set ns.me = ns %}`), directly or through
  // a list or dict; such a cycle of shared_ptrs would outlive the render.
  // Every cycle passes through a namespace (the only mutable value), so
  // clearing the namespaces this render made frees them all.
  ~Renderer() {
    for (const std::weak_ptr<ValueDict>& weak : namespaces_) {
      if (std::shared_ptr<ValueDict> dict = weak.lock()) dict->Clear();
    }
  }
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  absl::Status Run(std::string* out) {
    Frame root;
    frames_.push_back(&root);
    root_ = &root;
    out_ = out;
    PDSERVE_ASSIGN_OR_RETURN(Flow f, Exec(t_.body));
    (void)f;
    return absl::OkStatus();
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Frame = absl::flat_hash_map<std::string, Value>;

  absl::Status Locate(int offset, absl::Status s) const {
    if (s.ok() || absl::StartsWith(s.message(), "chat template line ")) return s;
    return absl::Status(s.code(), absl::StrCat("chat template ",
                                                DescribeOffset(t_.source, offset),
                                                ": ", s.message()));
  }
  absl::Status Emit(absl::string_view s) {
    if (out_->size() + s.size() > options_.limits.max_output_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rendered output would exceed ", options_.limits.max_output_bytes, " bytes"));
    }
    out_->append(s.data(), s.size());
    return absl::OkStatus();
  }
  Value Lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto f = (*it)->find(name);
      if (f != (*it)->end()) return f->second;
    }
    if (const Value* v = globals_.Find(name)) return *v;
    // Built-in globals are defined values too (`strftime_now is defined`).
    if (const char* builtin = GlobalFunctionName(name)) return Value::Builtin(builtin);
    return Value::Undefined(absl::StrCat("'", name, "' is undefined"));
  }
  void Assign(const std::string& name, Value v) {
    (*frames_.back())[name] = std::move(v);
  }
  absl::Status AssignTargets(const std::vector<std::string>& targets,
                             const Value& v) {
    if (targets.size() == 1) {
      Assign(targets[0], v);
      return absl::OkStatus();
    }
    if (v.kind() != Value::Kind::kList || v.as_list().items.size() != targets.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot unpack ", v.TypeName(), " into ", targets.size(), " names"));
    }
    for (size_t i = 0; i < targets.size(); ++i) Assign(targets[i], v.as_list().items[i]);
    return absl::OkStatus();
  }

  absl::StatusOr<Flow> Exec(const Body& body);
  absl::StatusOr<Flow> ExecNode(const Node& n);
  absl::StatusOr<Flow> ExecFor(const Node& n);
  absl::StatusOr<std::string> Capture(const Body& body);
  absl::StatusOr<Value> ApplyFilters(const std::vector<ExprPtr>& filters, Value v);
  absl::StatusOr<Value> Eval(const Expr& e);
  absl::StatusOr<Value> EvalInner(const Expr& e);
  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first);
  absl::StatusOr<Value> EvalSlice(const Expr& e);
  absl::StatusOr<Value> EvalCompare(const Expr& e);
  absl::StatusOr<Value> CallGlobal(const Expr& e);
  absl::StatusOr<Value> CallMacro(const MacroDef& m, const CallArgs& args);

  const ParsedTemplate& t_;
  const ValueDict& globals_;
  const RenderOptions& options_;
  std::vector<Frame*> frames_;
  Frame* root_ = nullptr;
  std::string* out_ = nullptr;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
  std::vector<std::weak_ptr<ValueDict>> namespaces_;  // made by namespace()
};

absl::StatusOr<Renderer::Flow> Renderer::Exec(const Body& body) {
  for (const NodePtr& n : body) {
    absl::StatusOr<Flow> f = ExecNode(*n);
    if (!f.ok()) return Locate(n->offset, f.status());
    if (*f != Flow::kNormal) return *f;
  }
  return Flow::kNormal;
}

absl::StatusOr<std::string> Renderer::Capture(const Body& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  absl::StatusOr<Flow> f = Exec(body);
  out_ = saved;
  if (!f.ok()) return f.status();
  return buf;
}

absl::StatusOr<Value> Renderer::ApplyFilters(const std::vector<ExprPtr>& filters,
                                             Value v) {
  for (const ExprPtr& f : filters) {
    PDSERVE_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(*f, 1));
    PDSERVE_ASSIGN_OR_RETURN(v, ApplyFilter(f->name, v, args));
  }
  return v;
}

absl::StatusOr<Renderer::Flow> Renderer::ExecNode(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kData:
      PDSERVE_RETURN_IF_ERROR(Emit(n.text));
      return Flow::kNormal;
    case Node::Kind::kOutput: {
      PDSERVE_ASSIGN_OR_RETURN(Value v, Eval(*n.expr));
      PDSERVE_RETURN_IF_ERROR(Emit(v.Str()));
      return Flow::kNormal;
    }
    case Node::Kind::kIf:
      for (size_t i = 0; i < n.conds.size(); ++i) {
        PDSERVE_ASSIGN_OR_RETURN(Value c, Eval(*n.conds[i]));
        if (c.Truthy()) return Exec(n.bodies[i]);
      }
      if (n.bodies.size() > n.conds.size()) return Exec(n.bodies.back());
      return Flow::kNormal;
    case Node::Kind::kFor:
      return ExecFor(n);
    case Node::Kind::kSet: {
      PDSERVE_ASSIGN_OR_RETURN(Value v, Eval(*n.expr));
      if (!n.attr.empty()) {
        Value ns = Lookup(n.targets[0]);
        if (ns.kind() != Value::Kind::kNamespace) {
          return absl::InvalidArgumentError(absl::StrCat(
              "cannot assign attribute on non-namespace object '", n.targets[0], "'"));
        }
        ns.namespace_dict().Set(n.attr, std::move(v));
        return Flow::kNormal;
      }
      PDSERVE_RETURN_IF_ERROR(AssignTargets(n.targets, v));
      return Flow::kNormal;
    }
    case Node::Kind::kSetBlock: {
      PDSERVE_ASSIGN_OR_RETURN(std::string s, Capture(n.bodies[0]));
      PDSERVE_ASSIGN_OR_RETURN(Value v, ApplyFilters(n.filters, Value::String(std::move(s))));
      Assign(n.targets[0], std::move(v));
      return Flow::kNormal;
    }
    case Node::Kind::kFilterBlock: {
      PDSERVE_ASSIGN_OR_RETURN(std::string s, Capture(n.bodies[0]));
      PDSERVE_ASSIGN_OR_RETURN(Value v, ApplyFilters(n.filters, Value::String(std::move(s))));
      PDSERVE_RETURN_IF_ERROR(Emit(v.Str()));
      return Flow::kNormal;
    }
    case Node::Kind::kMacro:
      Assign(n.macro->name, Value::Macro(n.macro.get()));
      return Flow::kNormal;
    case Node::Kind::kBreak:
      return Flow::kBreak;
    case Node::Kind::kContinue:
      return Flow::kContinue;
    case Node::Kind::kScope: {
      Frame frame;
      for (size_t i = 0; i < n.targets.size(); ++i) {
        PDSERVE_ASSIGN_OR_RETURN(Value v, Eval(*n.conds[i]));
        frame[n.targets[i]] = std::move(v);
      }
      frames_.push_back(&frame);
      absl::StatusOr<Flow> f = Exec(n.bodies[0]);
      frames_.pop_back();
      return f;
    }
  }
  return Flow::kNormal;
}

absl::StatusOr<Renderer::Flow> Renderer::ExecFor(const Node& n) {
  PDSERVE_ASSIGN_OR_RETURN(Value iterable, Eval(*n.expr));
  PDSERVE_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(iterable));
  auto count_iteration = [&]() -> absl::Status {
    if (++iterations_ > options_.limits.max_loop_iterations) {
      return absl::InvalidArgumentError(absl::StrCat(
          "template loops ran more than ", options_.limits.max_loop_iterations,
          " iterations"));
    }
    return absl::OkStatus();
  };
  if (!n.conds.empty()) {  // {% for x in y if cond %}: filter first
    std::vector<Value> kept;
    for (Value& item : items) {
      PDSERVE_RETURN_IF_ERROR(count_iteration());
      Frame frame;
      frames_.push_back(&frame);
      absl::Status s = AssignTargets(n.targets, item);
      absl::StatusOr<Value> c = s.ok() ? Eval(*n.conds[0]) : absl::StatusOr<Value>(s);
      frames_.pop_back();
      if (!c.ok()) return c.status();
      if (c->Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  int64_t length = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < length; ++i) {
    PDSERVE_RETURN_IF_ERROR(count_iteration());
    Frame frame;
    frames_.push_back(&frame);
    ValueDict loop;
    loop.Set("index", Value::Int(i + 1));
    loop.Set("index0", Value::Int(i));
    loop.Set("revindex", Value::Int(length - i));
    loop.Set("revindex0", Value::Int(length - i - 1));
    loop.Set("first", Value::Bool(i == 0));
    loop.Set("last", Value::Bool(i == length - 1));
    loop.Set("length", Value::Int(length));
    loop.Set("depth", Value::Int(1));
    loop.Set("depth0", Value::Int(0));
    if (i > 0) loop.Set("previtem", items[i - 1]);
    if (i + 1 < length) loop.Set("nextitem", items[i + 1]);
    frame["loop"] = Value::Dict(std::move(loop));
    absl::Status s = AssignTargets(n.targets, items[i]);
    absl::StatusOr<Flow> f = s.ok() ? Exec(n.bodies[0]) : absl::StatusOr<Flow>(s);
    frames_.pop_back();
    if (!f.ok()) return f.status();
    if (*f == Flow::kBreak) break;
  }
  if (length == 0 && n.bodies.size() > 1) return Exec(n.bodies[1]);
  return Flow::kNormal;
}

absl::StatusOr<CallArgs> Renderer::EvalArgs(const Expr& e, size_t first) {
  CallArgs args;
  size_t n = e.args.size();
  size_t n_kw = e.kwarg_names.size();
  for (size_t i = first; i < n; ++i) {
    PDSERVE_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i]));
    if (i + n_kw >= n) {
      args.kwargs.emplace_back(e.kwarg_names[i + n_kw - n], std::move(v));
    } else {
      args.positional.push_back(std::move(v));
    }
  }
  return args;
}

absl::StatusOr<Value> Renderer::Eval(const Expr& e) {
  absl::StatusOr<Value> v = EvalInner(e);
  if (!v.ok()) return Locate(e.offset, v.status());
  if (v->Depth() > kMaxValueDepth) {
    return Locate(e.offset, absl::InvalidArgumentError(absl::StrCat(
                                "value nested deeper than ", kMaxValueDepth, " levels")));
  }
  return v;
}

absl::StatusOr<Value> Renderer::EvalSlice(const Expr& e) {
  PDSERVE_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
  std::optional<int64_t> parts[3];
  for (int i = 0; i < 3; ++i) {
    if (e.args[i + 1] == nullptr) continue;
    PDSERVE_ASSIGN_OR_RETURN(Value p, Eval(*e.args[i + 1]));
    if (p.is_none()) continue;
    if (p.kind() != Value::Kind::kInt) {
      return absl::InvalidArgumentError("TypeError: slice indices must be integers or None");
    }
    parts[i] = p.as_int();
  }
  int64_t step = parts[2].value_or(1);
  if (step == 0) return absl::InvalidArgumentError("ValueError: slice step cannot be zero");
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_string()) {
    std::vector<char32_t> cps = DecodeUtf8(obj.as_string());
    std::vector<char32_t> out;
    for (int64_t i : SliceIndices(cps.size(), parts[0], parts[1], step)) out.push_back(cps[i]);
    return Value::String(EncodeUtf8(out));
  }
  if (obj.kind() == Value::Kind::kList) {
    const auto& items = obj.as_list().items;
    std::vector<Value> out;
    for (int64_t i : SliceIndices(items.size(), parts[0], parts[1], step)) out.push_back(items[i]);
    return Value::List(std::move(out), obj.as_list().tuple);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("TypeError: '", obj.TypeName(), "' object is not subscriptable"));
}

absl::StatusOr<Value> Renderer::EvalCompare(const Expr& e) {
  PDSERVE_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
  for (size_t i = 0; i < e.ops.size(); ++i) {
    PDSERVE_ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1]));
    const std::string& op = e.ops[i];
    bool r;
    if (op == "==") {
      r = left.Equals(right);
    } else if (op == "!=") {
      r = !left.Equals(right);
    } else if (op == "in" || op == "notin") {
      PDSERVE_ASSIGN_OR_RETURN(bool c, Contains(right, left));
      r = (op == "in") == c;
    } else {
      PDSERVE_ASSIGN_OR_RETURN(int c, Compare(left, right));
      r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!r) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

absl::StatusOr<Value> Renderer::CallMacro(const MacroDef& m, const CallArgs& args) {
  if (call_depth_ >= options_.limits.max_call_depth) {
    return absl::InvalidArgumentError(absl::StrCat(
        "macro calls nested deeper than ", options_.limits.max_call_depth));
  }
  if (args.positional.size() > m.params.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "macro '", m.name, "' takes ", m.params.size(), " arguments, got ",
        args.positional.size()));
  }
  Frame local;
  std::vector<Frame*> saved = std::move(frames_);
  frames_ = {root_, &local};
  absl::Status status;
  for (size_t i = 0; i < m.params.size() && status.ok(); ++i) {
    if (i < args.positional.size()) {
      local[m.params[i]] = args.positional[i];
      continue;
    }
    bool found = false;
    for (const auto& [k, v] : args.kwargs) {
      if (k == m.params[i]) {
        local[k] = v;
        found = true;
      }
    }
    if (found) continue;
    if (m.defaults[i] != nullptr) {
      absl::StatusOr<Value> d = Eval(*m.defaults[i]);
      if (!d.ok()) status = d.status();
      else local[m.params[i]] = *std::move(d);
    } else {
      local[m.params[i]] = Value::Undefined(
          absl::StrCat("parameter '", m.params[i], "' was not provided"));
    }
  }
  for (const auto& kv : args.kwargs) {
    if (std::find(m.params.begin(), m.params.end(), kv.first) == m.params.end()) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "macro '", m.name, "' takes no keyword argument '", kv.first, "'"));
    }
  }
  absl::StatusOr<std::string> out;
  if (status.ok()) {
    ++call_depth_;
    out = Capture(m.body);
    --call_depth_;
  }
  frames_ = std::move(saved);
  PDSERVE_RETURN_IF_ERROR(status);
  if (!out.ok()) return out.status();
  return Value::String(*std::move(out));
}

absl::StatusOr<Value> Renderer::CallGlobal(const Expr& e) {
  PDSERVE_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 0));
  Value callee = Lookup(e.name);
  if (callee.kind() == Value::Kind::kMacro && callee.as_macro() != nullptr) {
    return CallMacro(*callee.as_macro(), args);
  }
  if (e.name == "raise_exception") {
    std::string msg = args.positional.empty() ? "" : args.positional[0].Str();
    return absl::InvalidArgumentError(
        absl::StrCat("raise_exception: ", msg));
  }
  if (e.name == "namespace" || e.name == "dict") {
    ValueDict d;
    for (const Value& p : args.positional) {
      if (p.kind() != Value::Kind::kDict) {
        return absl::InvalidArgumentError(absl::StrCat(e.name, "() positional argument must be a dict"));
      }
      for (const auto& [k, v] : p.as_dict().items()) d.Set(k, v);
    }
    for (const auto& [k, v] : args.kwargs) d.Set(k, v);
    if (e.name == "dict") return Value::Dict(std::move(d));
    Value ns = Value::Namespace(std::move(d));
    namespaces_.push_back(ns.namespace_weak());
    return ns;
  }
  if (e.name == "range") {
    PDSERVE_ASSIGN_OR_RETURN(auto a, BindArgs("range", args, {"a", "b", "step"}));
    int64_t v[3] = {0, 0, 1};
    for (int i = 0; i < 3; ++i) {
      if (!a[i].has_value()) continue;
      if (a[i]->kind() != Value::Kind::kInt) {
        return absl::InvalidArgumentError("TypeError: range() arguments must be integers");
      }
      v[i] = a[i]->as_int();
    }
    if (!a[0].has_value()) return absl::InvalidArgumentError("range expected at least 1 argument");
    int64_t start = a[1].has_value() ? v[0] : 0, stop = a[1].has_value() ? v[1] : v[0];
    int64_t step = v[2];
    if (step == 0) return absl::InvalidArgumentError("ValueError: range() arg 3 must not be zero");
    std::vector<Value> out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (static_cast<int64_t>(out.size()) >= kMaxRange) {
        return absl::InvalidArgumentError(absl::StrCat(
            "range() of more than ", kMaxRange, " items is not allowed"));
      }
      out.push_back(Value::Int(i));
    }
    return Value::List(std::move(out));
  }
  if (e.name == "strftime_now") {
    if (!options_.now.has_value()) {
      return absl::FailedPreconditionError(
          "strftime_now() called but no clock reading was given (RenderOptions.now)");
    }
    std::string fmt = args.positional.empty() ? "" : args.positional[0].Str();
    return Value::String(absl::FormatTime(fmt, *options_.now, absl::UTCTimeZone()));
  }
  return absl::InvalidArgumentError(absl::StrCat("'", e.name, "' is not callable"));
}

absl::StatusOr<Value> Renderer::EvalInner(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral: return e.literal;
    case Expr::Kind::kName: return Lookup(e.name);
    case Expr::Kind::kList: case Expr::Kind::kTuple: {
      std::vector<Value> items;
      for (const ExprPtr& a : e.args) {
        PDSERVE_ASSIGN_OR_RETURN(Value v, Eval(*a));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items), e.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      ValueDict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        PDSERVE_ASSIGN_OR_RETURN(Value k, Eval(*e.args[i]));
        PDSERVE_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1]));
        if (!k.is_string()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "dict literal keys must be strings, got ", k.TypeName()));
        }
        d.Set(k.as_string(), std::move(v));
      }
      return Value::Dict(std::move(d));
    }
    case Expr::Kind::kGetAttr: {
      PDSERVE_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      return GetAttr(obj, e.name);
    }
    case Expr::Kind::kGetItem: {
      PDSERVE_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      PDSERVE_ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
      return GetItem(obj, key);
    }
    case Expr::Kind::kSlice: return EvalSlice(e);
    case Expr::Kind::kCall: return CallGlobal(e);
    case Expr::Kind::kMethodCall: {
      PDSERVE_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      PDSERVE_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
      return CallMethod(obj, e.name, args);
    }
    case Expr::Kind::kFilter: {
      PDSERVE_ASSIGN_OR_RETURN(Value in, Eval(*e.args[0]));
      PDSERVE_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
      return ApplyFilter(e.name, in, args);
    }
    case Expr::Kind::kTest: {
      PDSERVE_ASSIGN_OR_RETURN(Value in, Eval(*e.args[0]));
      PDSERVE_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
      PDSERVE_ASSIGN_OR_RETURN(bool r, ApplyTest(e.name, in, args));
      return Value::Bool(r != e.negated);
    }
    case Expr::Kind::kNeg: case Expr::Kind::kPos: {
      PDSERVE_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      if (v.kind() == Value::Kind::kFloat) {
        return Value::Float(e.kind == Expr::Kind::kNeg ? -v.as_float() : v.as_float());
      }
      if (e.kind == Expr::Kind::kPos && v.is_number()) return BinaryOp("+", Value::Int(0), v, 0);
      return BinaryOp("-", Value::Int(0), v, options_.limits.max_output_bytes);
    }
    case Expr::Kind::kNot: {
      PDSERVE_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      return Value::Bool(!v.Truthy());
    }
    case Expr::Kind::kAnd: case Expr::Kind::kOr: {
      PDSERVE_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
      if (a.Truthy() == (e.kind == Expr::Kind::kOr)) return a;
      return Eval(*e.args[1]);
    }
    case Expr::Kind::kBinary: {
      PDSERVE_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
      PDSERVE_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
      return BinaryOp(e.name, a, b, options_.limits.max_output_bytes);
    }
    case Expr::Kind::kCompare: return EvalCompare(e);
    case Expr::Kind::kCondExpr: {
      PDSERVE_ASSIGN_OR_RETURN(Value c, Eval(*e.args[1]));
      if (c.Truthy()) return Eval(*e.args[0]);
      if (e.args[2] == nullptr) return Value::Undefined("conditional expression had no else");
      return Eval(*e.args[2]);
    }
  }
  return absl::InternalError("unknown expression kind");
}

}  // namespace

namespace {

void CollectExprLiterals(const Expr& e, std::string* out) {
  if (e.kind == Expr::Kind::kLiteral && e.literal.is_string()) {
    *out += e.literal.as_string();
    out->push_back('\0');
  }
  for (const ExprPtr& a : e.args) {
    if (a != nullptr) CollectExprLiterals(*a, out);
  }
}

void CollectBodyLiterals(const Body& body, std::string* out) {
  for (const NodePtr& n : body) {
    if (n->kind == Node::Kind::kData) {
      *out += n->text;
      out->push_back('\0');
    }
    if (n->expr != nullptr) CollectExprLiterals(*n->expr, out);
    for (const ExprPtr& c : n->conds) CollectExprLiterals(*c, out);
    for (const ExprPtr& f : n->filters) CollectExprLiterals(*f, out);
    for (const Body& b : n->bodies) CollectBodyLiterals(b, out);
    if (n->macro != nullptr) {
      for (const ExprPtr& d : n->macro->defaults) {
        if (d != nullptr) CollectExprLiterals(*d, out);
      }
      CollectBodyLiterals(n->macro->body, out);
    }
  }
}

}  // namespace

std::string Template::LiteralText() const {
  std::string out;
  CollectBodyLiterals(parsed_->body, &out);
  return out;
}

absl::StatusOr<Template> Template::Parse(absl::string_view source) {
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<ParsedTemplate> parsed, ParseTemplate(source));
  return Template(std::shared_ptr<const ParsedTemplate>(std::move(parsed)));
}

absl::StatusOr<std::string> Template::Render(const ValueDict& variables,
                                             const RenderOptions& options) const {
  std::string out;
  Renderer r(*parsed_, variables, options);
  PDSERVE_RETURN_IF_ERROR(r.Run(&out));
  return out;
}

}  // namespace pdserve::jinja
