// Syntax tree of a parsed Jinja template. Built once by the parser, then
// read (never written) by any number of concurrent renders.
#ifndef PDSERVE_SERVER_CHAT_JINJA_AST_H_
#define PDSERVE_SERVER_CHAT_JINJA_AST_H_

#include <memory>
#include <string>
#include <vector>

#include "server/chat/jinja/value.h"

namespace pdserve::jinja {

struct Expr;
struct Node;
using ExprPtr = std::unique_ptr<Expr>;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Expr {
  enum class Kind {
    kLiteral,     // literal
    kName,        // name
    kList,        // args = items
    kTuple,       // args = items
    kDict,        // args = key0, value0, key1, value1, ...
    kGetAttr,     // args[0].name
    kGetItem,     // args[0][args[1]]
    kSlice,       // args[0][args[1]:args[2]:args[3]] (null = omitted)
    kCall,        // name(args...) ; kwarg_names for the trailing kwargs
    kMethodCall,  // args[0].name(args[1:]...)
    kFilter,      // args[0] | name(args[1:]...)
    kTest,        // args[0] is [not] name(args[1:]...)
    kNeg,         // -args[0]
    kPos,         // +args[0]
    kNot,         // not args[0]
    kAnd,         // args[0] and args[1]
    kOr,          // args[0] or args[1]
    kBinary,      // args[0] <name> args[1]: + - * / // % ** ~
    kCompare,     // args[0] ops[0] args[1] ops[1] args[2] ...
    kCondExpr,    // args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind;
  int offset = 0;  // byte offset in the normalized source, for errors
  std::string name;
  Value literal;
  bool negated = false;                 // kTest: "is not"
  std::vector<ExprPtr> args;
  std::vector<std::string> kwarg_names;  // calls: names of the last N args
  std::vector<std::string> ops;          // kCompare: ==, !=, <, <=, >, >=, in, notin
};

// {% macro name(params, p=default) %}body{% endmacro %}
struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null when none
  Body body;
  int offset = 0;
};

struct Node {
  enum class Kind {
    kData,         // text
    kOutput,       // {{ expr }}
    kIf,           // conds[i] -> bodies[i]; bodies.size() > conds.size(): else
    kFor,          // for targets in expr [if conds[0]]: bodies[0] else bodies[1]
    kSet,          // {% set targets = expr %} or {% set targets[0].attr = expr %}
    kSetBlock,     // {% set targets[0] %}bodies[0]{% endset %} (+ filters)
    kMacro,        // macro
    kBreak,
    kContinue,
    kFilterBlock,  // {% filter ... %}bodies[0]{% endfilter %}
    kScope,        // {% generation %} (transformers), {% with %}: bodies[0]
  };
  Kind kind;
  int offset = 0;
  std::string text;
  ExprPtr expr;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  std::vector<std::string> targets;
  std::string attr;  // kSet on a namespace: {% set targets[0].attr = ... %}
  // kSetBlock / kFilterBlock: filters applied in order; each is a kFilter
  // Expr whose args[0] is null (the captured text goes there).
  std::vector<ExprPtr> filters;
  std::unique_ptr<MacroDef> macro;
  // kScope ({% with a = x %}): assignments targets[i] = conds[i].
};

}  // namespace pdserve::jinja

#endif  // PDSERVE_SERVER_CHAT_JINJA_AST_H_
