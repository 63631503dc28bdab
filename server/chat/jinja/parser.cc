#include "server/chat/jinja/parser.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/chat/jinja/builtins.h"
#include "server/chat/jinja/parser_internal.h"
#include "common/status_macros.h"

namespace pdserve::jinja {
namespace internal {

absl::StatusOr<Body> Parser::ParseBody(const std::vector<std::string>& end_tags,
                                       std::string* end_found) {
  DepthGuard guard(&depth_);
  PDSERVE_RETURN_IF_ERROR(CheckDepth());
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
        PDSERVE_ASSIGN_OR_RETURN(n->expr, ParseTuple(true));
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
        PDSERVE_RETURN_IF_ERROR(ParseStatement(&body));
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
    PDSERVE_ASSIGN_OR_RETURN(node, ParseIf(offset));
  } else if (name == "for") {
    PDSERVE_ASSIGN_OR_RETURN(node, ParseFor(offset));
  } else if (name == "set") {
    PDSERVE_ASSIGN_OR_RETURN(node, ParseSet(offset));
  } else if (name == "macro") {
    PDSERVE_ASSIGN_OR_RETURN(node, ParseMacro(offset));
  } else if (name == "filter") {
    PDSERVE_ASSIGN_OR_RETURN(node, ParseFilterBlock(offset));
  } else if (name == "with") {
    PDSERVE_ASSIGN_OR_RETURN(node, ParseWith(offset));
  } else if (name == "generation") {
    PDSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
    node = std::make_unique<Node>();
    node->kind = Node::Kind::kScope;
    node->offset = offset;
    PDSERVE_ASSIGN_OR_RETURN(Body b, ParseBody({"endgeneration"}, nullptr));
    node->bodies.push_back(std::move(b));
    PDSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
  } else if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) {
      return Error(offset, absl::StrCat("'{% ", name, " %}' outside of a for loop"));
    }
    PDSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
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
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(true));
    PDSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
    node->conds.push_back(std::move(cond));
    std::string end;
    PDSERVE_ASSIGN_OR_RETURN(Body b, ParseBody({"elif", "else", "endif"}, &end));
    node->bodies.push_back(std::move(b));
    if (end == "elif") continue;
    if (end == "else") {
      PDSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
      PDSERVE_ASSIGN_OR_RETURN(Body e, ParseBody({"endif"}, nullptr));
      node->bodies.push_back(std::move(e));
    }
    PDSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }
}

absl::StatusOr<std::vector<std::string>> Parser::ParseTargets() {
  std::vector<std::string> names;
  bool paren = IsOp("(");
  if (paren) ++pos_;
  while (true) {
    PDSERVE_ASSIGN_OR_RETURN(std::string n, ExpectName());
    names.push_back(n);
    if (!IsOp(",")) break;
    ++pos_;
    if (paren && IsOp(")")) break;
  }
  if (paren) PDSERVE_RETURN_IF_ERROR(ExpectOp(")"));
  return names;
}

absl::StatusOr<NodePtr> Parser::ParseFor(int offset) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kFor;
  node->offset = offset;
  PDSERVE_ASSIGN_OR_RETURN(node->targets, ParseTargets());
  if (!IsName("in")) return Unexpected("'in'");
  ++pos_;
  PDSERVE_ASSIGN_OR_RETURN(node->expr, ParseTuple(false));
  if (IsName("if")) {
    ++pos_;
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr cond, ParseExpression());
    node->conds.push_back(std::move(cond));
  }
  if (IsName("recursive")) {
    return Error(Cur().offset, "unsupported construct: recursive for loops");
  }
  PDSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
  ++loop_depth_;
  std::string end;
  absl::StatusOr<Body> b = ParseBody({"else", "endfor"}, &end);
  --loop_depth_;
  if (!b.ok()) return b.status();
  node->bodies.push_back(*std::move(b));
  if (end == "else") {
    PDSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
    PDSERVE_ASSIGN_OR_RETURN(Body e, ParseBody({"endfor"}, nullptr));
    node->bodies.push_back(std::move(e));
  }
  PDSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

absl::StatusOr<NodePtr> Parser::ParseSet(int offset) {
  auto node = std::make_unique<Node>();
  node->offset = offset;
  if (Cur().type == T::kName && Peek().type == T::kOp && Peek().text == ".") {
    node->targets.push_back(toks_[pos_].text);
    pos_ += 2;
    PDSERVE_ASSIGN_OR_RETURN(node->attr, ExpectName());
  } else {
    PDSERVE_ASSIGN_OR_RETURN(node->targets, ParseTargets());
  }
  if (IsOp("=")) {
    ++pos_;
    node->kind = Node::Kind::kSet;
    PDSERVE_ASSIGN_OR_RETURN(node->expr, ParseTuple(true));
    PDSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }
  if (node->targets.size() != 1 || !node->attr.empty()) {
    return Error(offset, "block '{% set %}' needs exactly one plain name");
  }
  node->kind = Node::Kind::kSetBlock;
  while (IsOp("|")) {
    ++pos_;
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr f, ParseFilterChainItem(nullptr));
    node->filters.push_back(std::move(f));
  }
  PDSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
  PDSERVE_ASSIGN_OR_RETURN(Body b, ParseBody({"endset"}, nullptr));
  node->bodies.push_back(std::move(b));
  PDSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

absl::StatusOr<NodePtr> Parser::ParseMacro(int offset) {
  auto def = std::make_unique<MacroDef>();
  def->offset = offset;
  PDSERVE_ASSIGN_OR_RETURN(def->name, ExpectName());
  PDSERVE_RETURN_IF_ERROR(ExpectOp("("));
  while (!IsOp(")")) {
    if (!def->params.empty()) PDSERVE_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp(")")) break;
    PDSERVE_ASSIGN_OR_RETURN(std::string p, ExpectName());
    def->params.push_back(p);
    ExprPtr dflt;
    if (IsOp("=")) {
      ++pos_;
      PDSERVE_ASSIGN_OR_RETURN(dflt, ParseExpression());
    }
    def->defaults.push_back(std::move(dflt));
  }
  ++pos_;
  PDSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
  int saved_loop = loop_depth_;
  loop_depth_ = 0;
  absl::StatusOr<Body> b = ParseBody({"endmacro"}, nullptr);
  loop_depth_ = saved_loop;
  if (!b.ok()) return b.status();
  def->body = *std::move(b);
  if (Cur().type == T::kName && Cur().text == def->name) ++pos_;
  PDSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
  macros_.insert(def->name);
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kMacro;
  node->offset = offset;
  node->macro = std::move(def);
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseFilterChainItem(ExprPtr input) {
  int offset = Cur().offset;
  PDSERVE_ASSIGN_OR_RETURN(std::string name, ExpectName());
  if (!IsKnownFilter(name)) {
    return Error(offset, absl::StrCat("unsupported construct: filter '", name, "'"));
  }
  auto f = MakeExpr(Expr::Kind::kFilter, offset);
  f->name = name;
  f->args.push_back(std::move(input));
  if (IsOp("(")) PDSERVE_RETURN_IF_ERROR(ParseCallArgs(f.get()));
  return f;
}

absl::StatusOr<NodePtr> Parser::ParseFilterBlock(int offset) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kFilterBlock;
  node->offset = offset;
  while (true) {
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr f, ParseFilterChainItem(nullptr));
    node->filters.push_back(std::move(f));
    if (!IsOp("|")) break;
    ++pos_;
  }
  PDSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
  PDSERVE_ASSIGN_OR_RETURN(Body b, ParseBody({"endfilter"}, nullptr));
  node->bodies.push_back(std::move(b));
  PDSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

absl::StatusOr<NodePtr> Parser::ParseWith(int offset) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kScope;
  node->offset = offset;
  while (Cur().type != T::kBlockEnd) {
    if (!node->targets.empty()) PDSERVE_RETURN_IF_ERROR(ExpectOp(","));
    PDSERVE_ASSIGN_OR_RETURN(std::string n, ExpectName());
    PDSERVE_RETURN_IF_ERROR(ExpectOp("="));
    PDSERVE_ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
    node->targets.push_back(n);
    node->conds.push_back(std::move(v));
  }
  ++pos_;
  PDSERVE_ASSIGN_OR_RETURN(Body b, ParseBody({"endwith"}, nullptr));
  node->bodies.push_back(std::move(b));
  PDSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

// --- expressions -----------------------------------------------------------

}  // namespace internal


const char* GlobalFunctionName(absl::string_view name) {
  static const char* const kNames[] = {"raise_exception", "namespace", "range",
                                       "dict", "strftime_now"};
  for (const char* n : kNames) {
    if (name == n) return n;
  }
  return nullptr;
}

absl::StatusOr<std::unique_ptr<ParsedTemplate>> ParseTemplate(
    absl::string_view source) {
  auto parsed = std::make_unique<ParsedTemplate>();
  parsed->source = NormalizeTemplateSource(source);
  PDSERVE_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(parsed->source));
  internal::Parser parser(parsed->source, std::move(tokens));
  PDSERVE_ASSIGN_OR_RETURN(parsed->body, parser.ParseRoot());
  return parsed;
}

}  // namespace pdserve::jinja