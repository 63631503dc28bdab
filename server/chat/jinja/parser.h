// Parser for the Jinja subset: template source -> syntax tree, once.
// Everything the interpreter cannot do (unknown filters/tests/methods/
// functions, {% include %}, {% call %}, ...) is rejected here, naming the
// construct and its line and column, so a template never renders wrong.
#ifndef PDSERVE_SERVER_CHAT_JINJA_PARSER_H_
#define PDSERVE_SERVER_CHAT_JINJA_PARSER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/chat/jinja/ast.h"

namespace pdserve::jinja {

// A parsed template. Immutable; safe to share between threads.
struct ParsedTemplate {
  std::string source;  // normalized source; node offsets index into it
  Body body;
};

// Limit on syntactic nesting (brackets, operators, blocks); deeper input is
// an InvalidArgument error rather than a stack overflow.
inline constexpr int kMaxParseDepth = 300;

absl::StatusOr<std::unique_ptr<ParsedTemplate>> ParseTemplate(
    absl::string_view source);

// The global functions templates may call (besides their own macros):
// returns the canonical static name, or nullptr when `name` is not one.
const char* GlobalFunctionName(absl::string_view name);
inline bool IsKnownGlobalFunction(absl::string_view name) {
  return GlobalFunctionName(name) != nullptr;
}

}  // namespace pdserve::jinja

#endif  // PDSERVE_SERVER_CHAT_JINJA_PARSER_H_
