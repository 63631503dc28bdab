// Expression parsing (jinja2's precedence: or < and < not < compare <
// + - < ~ < * / // % < ** < unary < filters/tests < postfix < primary).
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/chat/jinja/builtins.h"
#include "server/chat/jinja/parser_internal.h"
#include "common/status_macros.h"

namespace pdserve::jinja::internal {

absl::StatusOr<ExprPtr> Parser::ParseTuple(bool with_condexpr) {
  int offset = Cur().offset;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) {
      if (!IsOp(",")) break;
      ++pos_;
      is_tuple = true;
    }
    if (Cur().type == T::kBlockEnd || Cur().type == T::kVarEnd || IsOp(")") ||
        IsName("recursive")) {
      break;
    }
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(with_condexpr));
    items.push_back(std::move(e));
  }
  if (!is_tuple) {
    if (items.empty()) return Unexpected("an expression");
    return std::move(items[0]);
  }
  auto t = MakeExpr(Expr::Kind::kTuple, offset);
  t->args = std::move(items);
  return t;
}

absl::StatusOr<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  DepthGuard guard(&depth_);
  PDSERVE_RETURN_IF_ERROR(CheckDepth());
  PDSERVE_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
  if (!with_condexpr) return expr;
  DepthRestore restore(&depth_);
  while (IsName("if")) {
    PDSERVE_RETURN_IF_ERROR(Deepen());
    int offset = Cur().offset;
    ++pos_;
    auto cond = MakeExpr(Expr::Kind::kCondExpr, offset);
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    ExprPtr otherwise;
    if (IsName("else")) {
      ++pos_;
      PDSERVE_ASSIGN_OR_RETURN(otherwise, ParseExpression());
    }
    cond->args.push_back(std::move(expr));
    cond->args.push_back(std::move(test));
    cond->args.push_back(std::move(otherwise));
    expr = std::move(cond);
  }
  return expr;
}

absl::StatusOr<ExprPtr> Parser::ParseOr() {
  DepthRestore restore(&depth_);
  PDSERVE_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (IsName("or")) {
    PDSERVE_RETURN_IF_ERROR(Deepen());
    auto e = MakeExpr(Expr::Kind::kOr, Cur().offset);
    ++pos_;
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseAnd() {
  DepthRestore restore(&depth_);
  PDSERVE_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (IsName("and")) {
    PDSERVE_RETURN_IF_ERROR(Deepen());
    auto e = MakeExpr(Expr::Kind::kAnd, Cur().offset);
    ++pos_;
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseNot() {
  DepthGuard guard(&depth_);
  PDSERVE_RETURN_IF_ERROR(CheckDepth());
  if (IsName("not")) {
    auto e = MakeExpr(Expr::Kind::kNot, Cur().offset);
    ++pos_;
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr inner, ParseNot());
    e->args.push_back(std::move(inner));
    return e;
  }
  return ParseCompare();
}

absl::StatusOr<ExprPtr> Parser::ParseCompare() {
  int offset = Cur().offset;
  PDSERVE_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  auto cmp = MakeExpr(Expr::Kind::kCompare, offset);
  cmp->args.push_back(std::move(first));
  DepthRestore restore(&depth_);
  while (true) {
    PDSERVE_RETURN_IF_ERROR(Deepen());
    std::string op;
    if (Cur().type == T::kOp && (Cur().text == "==" || Cur().text == "!=" ||
                                 Cur().text == "<" || Cur().text == "<=" ||
                                 Cur().text == ">" || Cur().text == ">=")) {
      op = Cur().text;
      ++pos_;
    } else if (IsName("in")) {
      op = "in";
      ++pos_;
    } else if (IsName("not") && Peek().type == T::kName && Peek().text == "in") {
      op = "notin";
      pos_ += 2;
    } else {
      break;
    }
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath1());
    cmp->ops.push_back(op);
    cmp->args.push_back(std::move(rhs));
  }
  if (cmp->ops.empty()) return std::move(cmp->args[0]);
  return cmp;
}

absl::StatusOr<ExprPtr> Parser::ParseMath1() {
  DepthRestore restore(&depth_);
  PDSERVE_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
  while (IsOp("+") || IsOp("-")) {
    PDSERVE_RETURN_IF_ERROR(Deepen());
    auto e = MakeExpr(Expr::Kind::kBinary, Cur().offset);
    e->name = toks_[pos_++].text;
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseConcat() {
  DepthRestore restore(&depth_);
  PDSERVE_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
  while (IsOp("~")) {
    PDSERVE_RETURN_IF_ERROR(Deepen());
    auto e = MakeExpr(Expr::Kind::kBinary, Cur().offset);
    e->name = toks_[pos_++].text;
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseMath2() {
  DepthRestore restore(&depth_);
  PDSERVE_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    PDSERVE_RETURN_IF_ERROR(Deepen());
    auto e = MakeExpr(Expr::Kind::kBinary, Cur().offset);
    e->name = toks_[pos_++].text;
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParsePow() {
  DepthRestore restore(&depth_);
  PDSERVE_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
  while (IsOp("**")) {
    PDSERVE_RETURN_IF_ERROR(Deepen());
    auto e = MakeExpr(Expr::Kind::kBinary, Cur().offset);
    e->name = toks_[pos_++].text;
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  DepthGuard guard(&depth_);
  PDSERVE_RETURN_IF_ERROR(CheckDepth());
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    node = MakeExpr(IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos, Cur().offset);
    ++pos_;
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr inner, ParseUnary(false));
    node->args.push_back(std::move(inner));
  } else {
    PDSERVE_ASSIGN_OR_RETURN(node, ParsePrimary());
    PDSERVE_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  }
  if (with_filter) return ParseFilterExpr(std::move(node));
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParsePrimary() {
  const Token& t = Cur();
  int offset = t.offset;
  if (t.type == T::kName) {
    static const absl::flat_hash_set<std::string> kReserved = {
        "and", "or", "not", "in", "is", "if", "else"};
    if (kReserved.contains(t.text)) return Unexpected("an expression");
    ++pos_;
    auto e = MakeExpr(Expr::Kind::kLiteral, offset);
    if (t.text == "true" || t.text == "True") {
      e->literal = Value::Bool(true);
    } else if (t.text == "false" || t.text == "False") {
      e->literal = Value::Bool(false);
    } else if (t.text == "none" || t.text == "None") {
      e->literal = Value::None();
    } else {
      e->kind = Expr::Kind::kName;
      e->name = t.text;
    }
    return e;
  }
  if (t.type == T::kString) {
    std::string s;
    while (Cur().type == T::kString) s += toks_[pos_++].text;
    auto e = MakeExpr(Expr::Kind::kLiteral, offset);
    e->literal = Value::String(std::move(s));
    return e;
  }
  if (t.type == T::kInt || t.type == T::kFloat) {
    auto e = MakeExpr(Expr::Kind::kLiteral, offset);
    if (t.type == T::kInt) {
      int64_t v;
      if (!absl::SimpleAtoi(t.text, &v)) return Error(offset, "integer literal out of range");
      e->literal = Value::Int(v);
    } else {
      double d;
      if (!absl::SimpleAtod(t.text, &d)) return Error(offset, "malformed float literal");
      e->literal = Value::Float(d);
    }
    ++pos_;
    return e;
  }
  if (IsOp("(")) {
    ++pos_;
    if (IsOp(")")) {  // empty tuple
      ++pos_;
      return MakeExpr(Expr::Kind::kTuple, offset);
    }
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple(true));
    PDSERVE_RETURN_IF_ERROR(ExpectOp(")"));
    return inner;
  }
  if (IsOp("[") || IsOp("{")) {
    bool dict = IsOp("{");
    auto e = MakeExpr(dict ? Expr::Kind::kDict : Expr::Kind::kList, offset);
    ++pos_;
    const char* close = dict ? "}" : "]";
    while (!IsOp(close)) {
      if (!e->args.empty()) {
        PDSERVE_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(close)) break;
      }
      PDSERVE_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
      e->args.push_back(std::move(item));
      if (dict) {
        PDSERVE_RETURN_IF_ERROR(ExpectOp(":"));
        PDSERVE_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        e->args.push_back(std::move(value));
      }
    }
    ++pos_;
    return e;
  }
  return Unexpected("an expression");
}

absl::StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  DepthRestore restore(&depth_);
  while (true) {
    PDSERVE_RETURN_IF_ERROR(Deepen());
    if (IsOp(".") || IsOp("[")) {
      PDSERVE_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (IsOp("(")) {
      int offset = Cur().offset;
      if (node->kind == Expr::Kind::kName) {
        auto call = MakeExpr(Expr::Kind::kCall, offset);
        call->name = node->name;
        calls_.emplace_back(node->name, node->offset);
        PDSERVE_RETURN_IF_ERROR(ParseCallArgs(call.get()));
        node = std::move(call);
      } else if (node->kind == Expr::Kind::kGetAttr) {
        if (!IsKnownMethod(node->name)) {
          return Error(node->offset, absl::StrCat("unsupported construct: method '",
                                                  node->name, "()'"));
        }
        auto call = MakeExpr(Expr::Kind::kMethodCall, node->offset);
        call->name = node->name;
        call->args.push_back(std::move(node->args[0]));
        PDSERVE_RETURN_IF_ERROR(ParseCallArgs(call.get()));
        node = std::move(call);
      } else {
        return Error(offset, "unsupported construct: calling this kind of expression");
      }
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr node) {
  int offset = Cur().offset;
  if (IsOp(".")) {
    ++pos_;
    if (Cur().type == T::kName) {
      auto e = MakeExpr(Expr::Kind::kGetAttr, offset);
      e->name = toks_[pos_++].text;
      e->args.push_back(std::move(node));
      return e;
    }
    if (Cur().type == T::kInt) {
      auto e = MakeExpr(Expr::Kind::kGetItem, offset);
      auto idx = MakeExpr(Expr::Kind::kLiteral, Cur().offset);
      int64_t v = 0;
      (void)absl::SimpleAtoi(toks_[pos_++].text, &v);
      idx->literal = Value::Int(v);
      e->args.push_back(std::move(node));
      e->args.push_back(std::move(idx));
      return e;
    }
    return Unexpected("an attribute name");
  }
  ++pos_;  // [
  std::vector<ExprPtr> parts;  // start, stop, step
  bool slice = false;
  auto parse_part = [&]() -> absl::Status {
    if (IsOp(":") || IsOp("]")) {
      parts.push_back(nullptr);
      return absl::OkStatus();
    }
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
    parts.push_back(std::move(e));
    return absl::OkStatus();
  };
  PDSERVE_RETURN_IF_ERROR(parse_part());
  for (int i = 0; i < 2 && IsOp(":"); ++i) {
    ++pos_;
    slice = true;
    PDSERVE_RETURN_IF_ERROR(parse_part());
  }
  if (IsOp(",")) return Error(Cur().offset, "unsupported construct: tuple subscript");
  PDSERVE_RETURN_IF_ERROR(ExpectOp("]"));
  ExprPtr e;
  if (slice) {
    e = MakeExpr(Expr::Kind::kSlice, offset);
    e->args.push_back(std::move(node));
    parts.resize(3);
    for (auto& p : parts) e->args.push_back(std::move(p));
  } else {
    if (parts[0] == nullptr) return Error(offset, "empty subscript");
    e = MakeExpr(Expr::Kind::kGetItem, offset);
    e->args.push_back(std::move(node));
    e->args.push_back(std::move(parts[0]));
  }
  return e;
}

absl::Status Parser::ParseCallArgs(Expr* call) {
  PDSERVE_RETURN_IF_ERROR(ExpectOp("("));
  bool first = true;
  while (!IsOp(")")) {
    if (!first) {
      PDSERVE_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
    }
    first = false;
    if (IsOp("*") || IsOp("**")) {
      return Error(Cur().offset, "unsupported construct: *args / **kwargs in a call");
    }
    if (Cur().type == T::kName && Peek().type == T::kOp && Peek().text == "=") {
      call->kwarg_names.push_back(toks_[pos_].text);
      pos_ += 2;
    } else if (!call->kwarg_names.empty()) {
      return Error(Cur().offset, "positional argument after keyword argument");
    }
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr arg, ParseExpression());
    call->args.push_back(std::move(arg));
  }
  ++pos_;
  return absl::OkStatus();
}

absl::StatusOr<ExprPtr> Parser::ParseTest(ExprPtr node) {
  auto e = MakeExpr(Expr::Kind::kTest, Cur().offset);
  ++pos_;  // is
  if (IsName("not")) {
    e->negated = true;
    ++pos_;
  }
  int name_offset = Cur().offset;
  PDSERVE_ASSIGN_OR_RETURN(e->name, ExpectName());
  if (!IsKnownTest(e->name)) {
    return Error(name_offset, absl::StrCat("unsupported construct: test '", e->name, "'"));
  }
  e->args.push_back(std::move(node));
  if (IsOp("(")) {
    PDSERVE_RETURN_IF_ERROR(ParseCallArgs(e.get()));
  } else if ((Cur().type == T::kName || Cur().type == T::kString ||
              Cur().type == T::kInt || Cur().type == T::kFloat || IsOp("(") ||
              IsOp("[") || IsOp("{")) &&
             !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) return Error(Cur().offset, "cannot chain multiple tests with 'is'");
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
    PDSERVE_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    e->args.push_back(std::move(arg));
  }
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  DepthRestore restore(&depth_);
  while (true) {
    PDSERVE_RETURN_IF_ERROR(Deepen());
    if (IsOp("|")) {
      ++pos_;
      PDSERVE_ASSIGN_OR_RETURN(node, ParseFilterChainItem(std::move(node)));
    } else if (IsName("is")) {
      PDSERVE_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOp("(")) {
      return Error(Cur().offset, "unsupported construct: calling a filter or test result");
    } else {
      return node;
    }
  }
}


}  // namespace pdserve::jinja::internal
