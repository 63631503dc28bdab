// Internal: the recursive-descent parser class shared by parser.cc
// (statements) and parser_expr.cc (expressions). Not part of the API.
#ifndef PDSERVE_SERVER_CHAT_JINJA_PARSER_INTERNAL_H_
#define PDSERVE_SERVER_CHAT_JINJA_PARSER_INTERNAL_H_

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "server/chat/jinja/ast.h"
#include "server/chat/jinja/lexer.h"
#include "server/chat/jinja/parser.h"
#include "common/status_macros.h"

namespace pdserve::jinja::internal {

using T = Token::Type;

inline ExprPtr MakeExpr(Expr::Kind kind, int offset) {
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
    PDSERVE_ASSIGN_OR_RETURN(Body body, ParseBody({}, nullptr));
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


}  // namespace pdserve::jinja::internal

#endif  // PDSERVE_SERVER_CHAT_JINJA_PARSER_INTERNAL_H_
