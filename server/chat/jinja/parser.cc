#include "server/chat/jinja/parser.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/chat/jinja/builtins.h"
#include "server/chat/jinja/lexer.h"
#include "server/chat/jinja/status_macros.h"

namespace pdserve::jinja {
namespace {

using T = Token::Type;

ExprPtr MakeExpr(Expr::Kind kind, int offset) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->offset = offset;
  return e;
}

class Parser {
 public:
  Parser(const std::string& source, std::vector<Token> tokens)
      : src_(source), toks_(std::move(tokens)) {}

  absl::StatusOr<Body> ParseRoot() {
    PDJ_ASSIGN_OR_RETURN(Body body, ParseBody({}, nullptr));
    for (const auto& [name, offset] : calls_) {
      if (!IsKnownGlobalFunction(name) && !macros_.contains(name)) {
        return Error(offset, absl::StrCat("unsupported construct: call of unknown function '",
                                          name, "'"));
      }
    }
    return body;
  }

 private:
  // --- helpers -------------------------------------------------------------
  const Token& Cur() const { return toks_[pos_]; }
  const Token& Peek(int k = 1) const {
    return toks_[std::min(pos_ + k, toks_.size() - 1)];
  }
  bool IsOp(absl::string_view op) const {
    return Cur().type == T::kOp && Cur().text == op;
  }
  bool IsName(absl::string_view name) const {
    return Cur().type == T::kName && Cur().text == name;
  }
  absl::Status Error(int offset, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "chat template ", DescribeOffset(src_, offset), ": ", what));
  }
  std::string Describe(const Token& t) const {
    switch (t.type) {
      case T::kEof: return "end of template";
      case T::kBlockEnd: return "'%}'";
      case T::kVarEnd: return "'}}'";
      case T::kString: return "string literal";
      case T::kData: return "template text";
      default: return absl::StrCat("'", t.text, "'");
    }
  }
  absl::Status Unexpected(absl::string_view expected) const {
    return Error(Cur().offset, absl::StrCat("expected ", expected, ", got ",
                                            Describe(Cur())));
  }
  absl::Status ExpectOp(absl::string_view op) {
    if (!IsOp(op)) return Unexpected(absl::StrCat("'", op, "'"));
    ++pos_;
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Cur().type != T::kBlockEnd) return Unexpected("'%}'");
    ++pos_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().type != T::kName) return Unexpected("a name");
    return toks_[pos_++].text;
  }
  // RAII nesting guard.
  struct DepthGuard {
    explicit DepthGuard(int* d) : depth(d) { ++*depth; }
    ~DepthGuard() { --*depth; }
    int* depth;
  };
  // Restores depth_ on scope exit; Deepen() counts each link of an operator
  // or postfix chain as one level, so tree height stays within the limit.
  struct DepthRestore {
    explicit DepthRestore(int* d) : depth(d), saved(*d) {}
    ~DepthRestore() { *depth = saved; }
    int* depth;
    int saved;
  };
  absl::Status Deepen() {
    ++depth_;
    return CheckDepth();
  }
  absl::Status CheckDepth() const {
    if (depth_ > kMaxParseDepth) {
      return Error(Cur().offset, absl::StrCat("template nesting deeper than ",
                                              kMaxParseDepth, " levels"));
    }
    return absl::OkStatus();
  }

  // --- statements ----------------------------------------------------------
  absl::StatusOr<Body> ParseBody(const std::vector<std::string>& end_tags,
                                 std::string* end_found);
  absl::Status ParseStatement(Body* body);
  absl::StatusOr<NodePtr> ParseIf(int offset);
  absl::StatusOr<NodePtr> ParseFor(int offset);
  absl::StatusOr<NodePtr> ParseSet(int offset);
  absl::StatusOr<NodePtr> ParseMacro(int offset);
  absl::StatusOr<NodePtr> ParseFilterBlock(int offset);
  absl::StatusOr<NodePtr> ParseWith(int offset);
  absl::StatusOr<std::vector<std::string>> ParseTargets();
  absl::StatusOr<ExprPtr> ParseFilterChainItem(ExprPtr input);

  // --- expressions ---------------------------------------------------------
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condexpr);
  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr = true);
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  absl::StatusOr<ExprPtr> ParseMath1();
  absl::StatusOr<ExprPtr> ParseConcat();
  absl::StatusOr<ExprPtr> ParseMath2();
  absl::StatusOr<ExprPtr> ParsePow();
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary();
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  absl::Status ParseCallArgs(Expr* call);
  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node);

  const std::string& src_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  absl::flat_hash_set<std::string> macros_;
  std::vector<std::pair<std::string, int>> calls_;
};

absl::StatusOr<Body> Parser::ParseBody(const std::vector<std::string>& end_tags,
                                       std::string* end_found) {
  DepthGuard guard(&depth_);
  PDJ_RETURN_IF_ERROR(CheckDepth());
  Body body;
  while (true) {
    const Token& t = Cur();
    switch (t.type) {
      case T::kEof:
        if (!end_tags.empty()) {
          return Error(t.offset, absl::StrCat("unexpected end of template, expected '{% ",
                                              end_tags.back(), " %}'"));
        }
        return body;
      case T::kData: {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kData;
        n->offset = t.offset;
        n->text = t.text;
        body.push_back(std::move(n));
        ++pos_;
        break;
      }
      case T::kVarBegin: {
        int offset = t.offset;
        ++pos_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->offset = offset;
        PDJ_ASSIGN_OR_RETURN(n->expr, ParseTuple(true));
        if (Cur().type != T::kVarEnd) return Unexpected("'}}'");
        ++pos_;
        body.push_back(std::move(n));
        break;
      }
      case T::kBlockBegin: {
        const Token& name = Peek();
        if (name.type == T::kName) {
          for (const std::string& tag : end_tags) {
            if (name.text == tag) {
              pos_ += 2;
              if (end_found != nullptr) *end_found = tag;
              return body;
            }
          }
        }
        PDJ_RETURN_IF_ERROR(ParseStatement(&body));
        break;
      }
      default:
        return Unexpected("template text or a tag");
    }
  }
}

absl::Status Parser::ParseStatement(Body* body) {
  int offset = Cur().offset;
  ++pos_;  // {%
  if (Cur().type != T::kName) return Unexpected("a statement name");
  std::string name = toks_[pos_++].text;
  NodePtr node;
  if (name == "if") {
    PDJ_ASSIGN_OR_RETURN(node, ParseIf(offset));
  } else if (name == "for") {
    PDJ_ASSIGN_OR_RETURN(node, ParseFor(offset));
  } else if (name == "set") {
    PDJ_ASSIGN_OR_RETURN(node, ParseSet(offset));
  } else if (name == "macro") {
    PDJ_ASSIGN_OR_RETURN(node, ParseMacro(offset));
  } else if (name == "filter") {
    PDJ_ASSIGN_OR_RETURN(node, ParseFilterBlock(offset));
  } else if (name == "with") {
    PDJ_ASSIGN_OR_RETURN(node, ParseWith(offset));
  } else if (name == "generation") {
    PDJ_RETURN_IF_ERROR(ExpectBlockEnd());
    node = std::make_unique<Node>();
    node->kind = Node::Kind::kScope;
    node->offset = offset;
    PDJ_ASSIGN_OR_RETURN(Body b, ParseBody({"endgeneration"}, nullptr));
    node->bodies.push_back(std::move(b));
    PDJ_RETURN_IF_ERROR(ExpectBlockEnd());
  } else if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) {
      return Error(offset, absl::StrCat("'{% ", name, " %}' outside of a for loop"));
    }
    PDJ_RETURN_IF_ERROR(ExpectBlockEnd());
    node = std::make_unique<Node>();
    node->kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
    node->offset = offset;
  } else if (name.rfind("end", 0) == 0 || name == "elif" || name == "else") {
    return Error(offset, absl::StrCat("unexpected '{% ", name, " %}'"));
  } else {
    return Error(offset, absl::StrCat("unsupported construct: '{% ", name, " %}' statement"));
  }
  body->push_back(std::move(node));
  return absl::OkStatus();
}

absl::StatusOr<NodePtr> Parser::ParseIf(int offset) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kIf;
  node->offset = offset;
  while (true) {
    PDJ_ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(true));
    PDJ_RETURN_IF_ERROR(ExpectBlockEnd());
    node->conds.push_back(std::move(cond));
    std::string end;
    PDJ_ASSIGN_OR_RETURN(Body b, ParseBody({"elif", "else", "endif"}, &end));
    node->bodies.push_back(std::move(b));
    if (end == "elif") continue;
    if (end == "else") {
      PDJ_RETURN_IF_ERROR(ExpectBlockEnd());
      PDJ_ASSIGN_OR_RETURN(Body e, ParseBody({"endif"}, nullptr));
      node->bodies.push_back(std::move(e));
    }
    PDJ_RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }
}

absl::StatusOr<std::vector<std::string>> Parser::ParseTargets() {
  std::vector<std::string> names;
  bool paren = IsOp("(");
  if (paren) ++pos_;
  while (true) {
    PDJ_ASSIGN_OR_RETURN(std::string n, ExpectName());
    names.push_back(n);
    if (!IsOp(",")) break;
    ++pos_;
    if (paren && IsOp(")")) break;
  }
  if (paren) PDJ_RETURN_IF_ERROR(ExpectOp(")"));
  return names;
}

absl::StatusOr<NodePtr> Parser::ParseFor(int offset) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kFor;
  node->offset = offset;
  PDJ_ASSIGN_OR_RETURN(node->targets, ParseTargets());
  if (!IsName("in")) return Unexpected("'in'");
  ++pos_;
  PDJ_ASSIGN_OR_RETURN(node->expr, ParseTuple(false));
  if (IsName("if")) {
    ++pos_;
    PDJ_ASSIGN_OR_RETURN(ExprPtr cond, ParseExpression());
    node->conds.push_back(std::move(cond));
  }
  if (IsName("recursive")) {
    return Error(Cur().offset, "unsupported construct: recursive for loops");
  }
  PDJ_RETURN_IF_ERROR(ExpectBlockEnd());
  ++loop_depth_;
  std::string end;
  absl::StatusOr<Body> b = ParseBody({"else", "endfor"}, &end);
  --loop_depth_;
  if (!b.ok()) return b.status();
  node->bodies.push_back(*std::move(b));
  if (end == "else") {
    PDJ_RETURN_IF_ERROR(ExpectBlockEnd());
    PDJ_ASSIGN_OR_RETURN(Body e, ParseBody({"endfor"}, nullptr));
    node->bodies.push_back(std::move(e));
  }
  PDJ_RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

absl::StatusOr<NodePtr> Parser::ParseSet(int offset) {
  auto node = std::make_unique<Node>();
  node->offset = offset;
  if (Cur().type == T::kName && Peek().type == T::kOp && Peek().text == ".") {
    node->targets.push_back(toks_[pos_].text);
    pos_ += 2;
    PDJ_ASSIGN_OR_RETURN(node->attr, ExpectName());
  } else {
    PDJ_ASSIGN_OR_RETURN(node->targets, ParseTargets());
  }
  if (IsOp("=")) {
    ++pos_;
    node->kind = Node::Kind::kSet;
    PDJ_ASSIGN_OR_RETURN(node->expr, ParseTuple(true));
    PDJ_RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }
  if (node->targets.size() != 1 || !node->attr.empty()) {
    return Error(offset, "block '{% set %}' needs exactly one plain name");
  }
  node->kind = Node::Kind::kSetBlock;
  while (IsOp("|")) {
    ++pos_;
    PDJ_ASSIGN_OR_RETURN(ExprPtr f, ParseFilterChainItem(nullptr));
    node->filters.push_back(std::move(f));
  }
  PDJ_RETURN_IF_ERROR(ExpectBlockEnd());
  PDJ_ASSIGN_OR_RETURN(Body b, ParseBody({"endset"}, nullptr));
  node->bodies.push_back(std::move(b));
  PDJ_RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

absl::StatusOr<NodePtr> Parser::ParseMacro(int offset) {
  auto def = std::make_unique<MacroDef>();
  def->offset = offset;
  PDJ_ASSIGN_OR_RETURN(def->name, ExpectName());
  PDJ_RETURN_IF_ERROR(ExpectOp("("));
  while (!IsOp(")")) {
    if (!def->params.empty()) PDJ_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp(")")) break;
    PDJ_ASSIGN_OR_RETURN(std::string p, ExpectName());
    def->params.push_back(p);
    ExprPtr dflt;
    if (IsOp("=")) {
      ++pos_;
      PDJ_ASSIGN_OR_RETURN(dflt, ParseExpression());
    }
    def->defaults.push_back(std::move(dflt));
  }
  ++pos_;
  PDJ_RETURN_IF_ERROR(ExpectBlockEnd());
  int saved_loop = loop_depth_;
  loop_depth_ = 0;
  absl::StatusOr<Body> b = ParseBody({"endmacro"}, nullptr);
  loop_depth_ = saved_loop;
  if (!b.ok()) return b.status();
  def->body = *std::move(b);
  if (Cur().type == T::kName && Cur().text == def->name) ++pos_;
  PDJ_RETURN_IF_ERROR(ExpectBlockEnd());
  macros_.insert(def->name);
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kMacro;
  node->offset = offset;
  node->macro = std::move(def);
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseFilterChainItem(ExprPtr input) {
  int offset = Cur().offset;
  PDJ_ASSIGN_OR_RETURN(std::string name, ExpectName());
  if (!IsKnownFilter(name)) {
    return Error(offset, absl::StrCat("unsupported construct: filter '", name, "'"));
  }
  auto f = MakeExpr(Expr::Kind::kFilter, offset);
  f->name = name;
  f->args.push_back(std::move(input));
  if (IsOp("(")) PDJ_RETURN_IF_ERROR(ParseCallArgs(f.get()));
  return f;
}

absl::StatusOr<NodePtr> Parser::ParseFilterBlock(int offset) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kFilterBlock;
  node->offset = offset;
  while (true) {
    PDJ_ASSIGN_OR_RETURN(ExprPtr f, ParseFilterChainItem(nullptr));
    node->filters.push_back(std::move(f));
    if (!IsOp("|")) break;
    ++pos_;
  }
  PDJ_RETURN_IF_ERROR(ExpectBlockEnd());
  PDJ_ASSIGN_OR_RETURN(Body b, ParseBody({"endfilter"}, nullptr));
  node->bodies.push_back(std::move(b));
  PDJ_RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

absl::StatusOr<NodePtr> Parser::ParseWith(int offset) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kScope;
  node->offset = offset;
  while (Cur().type != T::kBlockEnd) {
    if (!node->targets.empty()) PDJ_RETURN_IF_ERROR(ExpectOp(","));
    PDJ_ASSIGN_OR_RETURN(std::string n, ExpectName());
    PDJ_RETURN_IF_ERROR(ExpectOp("="));
    PDJ_ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
    node->targets.push_back(n);
    node->conds.push_back(std::move(v));
  }
  ++pos_;
  PDJ_ASSIGN_OR_RETURN(Body b, ParseBody({"endwith"}, nullptr));
  node->bodies.push_back(std::move(b));
  PDJ_RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

// --- expressions -----------------------------------------------------------

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
    PDJ_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(with_condexpr));
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
  PDJ_RETURN_IF_ERROR(CheckDepth());
  PDJ_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
  if (!with_condexpr) return expr;
  DepthRestore restore(&depth_);
  while (IsName("if")) {
    PDJ_RETURN_IF_ERROR(Deepen());
    int offset = Cur().offset;
    ++pos_;
    auto cond = MakeExpr(Expr::Kind::kCondExpr, offset);
    PDJ_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    ExprPtr otherwise;
    if (IsName("else")) {
      ++pos_;
      PDJ_ASSIGN_OR_RETURN(otherwise, ParseExpression());
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
  PDJ_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (IsName("or")) {
    PDJ_RETURN_IF_ERROR(Deepen());
    auto e = MakeExpr(Expr::Kind::kOr, Cur().offset);
    ++pos_;
    PDJ_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseAnd() {
  DepthRestore restore(&depth_);
  PDJ_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (IsName("and")) {
    PDJ_RETURN_IF_ERROR(Deepen());
    auto e = MakeExpr(Expr::Kind::kAnd, Cur().offset);
    ++pos_;
    PDJ_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseNot() {
  DepthGuard guard(&depth_);
  PDJ_RETURN_IF_ERROR(CheckDepth());
  if (IsName("not")) {
    auto e = MakeExpr(Expr::Kind::kNot, Cur().offset);
    ++pos_;
    PDJ_ASSIGN_OR_RETURN(ExprPtr inner, ParseNot());
    e->args.push_back(std::move(inner));
    return e;
  }
  return ParseCompare();
}

absl::StatusOr<ExprPtr> Parser::ParseCompare() {
  int offset = Cur().offset;
  PDJ_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  auto cmp = MakeExpr(Expr::Kind::kCompare, offset);
  cmp->args.push_back(std::move(first));
  DepthRestore restore(&depth_);
  while (true) {
    PDJ_RETURN_IF_ERROR(Deepen());
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
    PDJ_ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath1());
    cmp->ops.push_back(op);
    cmp->args.push_back(std::move(rhs));
  }
  if (cmp->ops.empty()) return std::move(cmp->args[0]);
  return cmp;
}

absl::StatusOr<ExprPtr> Parser::ParseMath1() {
  DepthRestore restore(&depth_);
  PDJ_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
  while (IsOp("+") || IsOp("-")) {
    PDJ_RETURN_IF_ERROR(Deepen());
    auto e = MakeExpr(Expr::Kind::kBinary, Cur().offset);
    e->name = toks_[pos_++].text;
    PDJ_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseConcat() {
  DepthRestore restore(&depth_);
  PDJ_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
  while (IsOp("~")) {
    PDJ_RETURN_IF_ERROR(Deepen());
    auto e = MakeExpr(Expr::Kind::kBinary, Cur().offset);
    e->name = toks_[pos_++].text;
    PDJ_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseMath2() {
  DepthRestore restore(&depth_);
  PDJ_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    PDJ_RETURN_IF_ERROR(Deepen());
    auto e = MakeExpr(Expr::Kind::kBinary, Cur().offset);
    e->name = toks_[pos_++].text;
    PDJ_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParsePow() {
  DepthRestore restore(&depth_);
  PDJ_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
  while (IsOp("**")) {
    PDJ_RETURN_IF_ERROR(Deepen());
    auto e = MakeExpr(Expr::Kind::kBinary, Cur().offset);
    e->name = toks_[pos_++].text;
    PDJ_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  DepthGuard guard(&depth_);
  PDJ_RETURN_IF_ERROR(CheckDepth());
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    node = MakeExpr(IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos, Cur().offset);
    ++pos_;
    PDJ_ASSIGN_OR_RETURN(ExprPtr inner, ParseUnary(false));
    node->args.push_back(std::move(inner));
  } else {
    PDJ_ASSIGN_OR_RETURN(node, ParsePrimary());
    PDJ_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
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
    PDJ_ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple(true));
    PDJ_RETURN_IF_ERROR(ExpectOp(")"));
    return inner;
  }
  if (IsOp("[") || IsOp("{")) {
    bool dict = IsOp("{");
    auto e = MakeExpr(dict ? Expr::Kind::kDict : Expr::Kind::kList, offset);
    ++pos_;
    const char* close = dict ? "}" : "]";
    while (!IsOp(close)) {
      if (!e->args.empty()) {
        PDJ_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(close)) break;
      }
      PDJ_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
      e->args.push_back(std::move(item));
      if (dict) {
        PDJ_RETURN_IF_ERROR(ExpectOp(":"));
        PDJ_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
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
    PDJ_RETURN_IF_ERROR(Deepen());
    if (IsOp(".") || IsOp("[")) {
      PDJ_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (IsOp("(")) {
      int offset = Cur().offset;
      if (node->kind == Expr::Kind::kName) {
        auto call = MakeExpr(Expr::Kind::kCall, offset);
        call->name = node->name;
        calls_.emplace_back(node->name, node->offset);
        PDJ_RETURN_IF_ERROR(ParseCallArgs(call.get()));
        node = std::move(call);
      } else if (node->kind == Expr::Kind::kGetAttr) {
        if (!IsKnownMethod(node->name)) {
          return Error(node->offset, absl::StrCat("unsupported construct: method '",
                                                  node->name, "()'"));
        }
        auto call = MakeExpr(Expr::Kind::kMethodCall, node->offset);
        call->name = node->name;
        call->args.push_back(std::move(node->args[0]));
        PDJ_RETURN_IF_ERROR(ParseCallArgs(call.get()));
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
    PDJ_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
    parts.push_back(std::move(e));
    return absl::OkStatus();
  };
  PDJ_RETURN_IF_ERROR(parse_part());
  for (int i = 0; i < 2 && IsOp(":"); ++i) {
    ++pos_;
    slice = true;
    PDJ_RETURN_IF_ERROR(parse_part());
  }
  if (IsOp(",")) return Error(Cur().offset, "unsupported construct: tuple subscript");
  PDJ_RETURN_IF_ERROR(ExpectOp("]"));
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
  PDJ_RETURN_IF_ERROR(ExpectOp("("));
  bool first = true;
  while (!IsOp(")")) {
    if (!first) {
      PDJ_RETURN_IF_ERROR(ExpectOp(","));
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
    PDJ_ASSIGN_OR_RETURN(ExprPtr arg, ParseExpression());
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
  PDJ_ASSIGN_OR_RETURN(e->name, ExpectName());
  if (!IsKnownTest(e->name)) {
    return Error(name_offset, absl::StrCat("unsupported construct: test '", e->name, "'"));
  }
  e->args.push_back(std::move(node));
  if (IsOp("(")) {
    PDJ_RETURN_IF_ERROR(ParseCallArgs(e.get()));
  } else if ((Cur().type == T::kName || Cur().type == T::kString ||
              Cur().type == T::kInt || Cur().type == T::kFloat || IsOp("(") ||
              IsOp("[") || IsOp("{")) &&
             !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) return Error(Cur().offset, "cannot chain multiple tests with 'is'");
    PDJ_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
    PDJ_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    e->args.push_back(std::move(arg));
  }
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  DepthRestore restore(&depth_);
  while (true) {
    PDJ_RETURN_IF_ERROR(Deepen());
    if (IsOp("|")) {
      ++pos_;
      PDJ_ASSIGN_OR_RETURN(node, ParseFilterChainItem(std::move(node)));
    } else if (IsName("is")) {
      PDJ_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOp("(")) {
      return Error(Cur().offset, "unsupported construct: calling a filter or test result");
    } else {
      return node;
    }
  }
}

}  // namespace

bool IsKnownGlobalFunction(absl::string_view name) {
  return name == "raise_exception" || name == "namespace" || name == "range" ||
         name == "dict" || name == "strftime_now";
}

absl::StatusOr<std::unique_ptr<ParsedTemplate>> ParseTemplate(
    absl::string_view source) {
  auto parsed = std::make_unique<ParsedTemplate>();
  parsed->source = NormalizeTemplateSource(source);
  PDJ_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(parsed->source));
  Parser parser(parsed->source, std::move(tokens));
  PDJ_ASSIGN_OR_RETURN(parsed->body, parser.ParseRoot());
  return parsed;
}

}  // namespace pdserve::jinja
