// Built-in filters, tests and methods of the Jinja subset, with jinja2 /
// Python semantics (plus transformers' `tojson` override). Pure functions.
#ifndef PDSERVE_SERVER_CHAT_JINJA_BUILTINS_H_
#define PDSERVE_SERVER_CHAT_JINJA_BUILTINS_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/chat/jinja/value.h"

namespace pdserve::jinja {

// Arguments of a filter, test, method or function call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> kwargs;
};

// Binds `args` to the parameter names in order (Python rules: positional
// first, then keywords; unknown keyword or too many positionals is an
// error naming `function`). Unbound parameters are std::nullopt.
absl::StatusOr<std::vector<std::optional<Value>>> BindArgs(
    absl::string_view function, const CallArgs& args,
    const std::vector<std::string>& params);

// INVALID_ARGUMENT "TypeError: `what`", as Python words a bad argument.
absl::Status TypeError(absl::string_view what);

// Names the parser accepts; anything else is rejected at parse time.
bool IsKnownFilter(absl::string_view name);
bool IsKnownTest(absl::string_view name);
bool IsKnownMethod(absl::string_view name);

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& input,
                                  const CallArgs& args);
absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& input,
                               const CallArgs& args);
// obj.name(args) for str, dict and list methods.
absl::StatusOr<Value> CallMethod(const Value& obj, absl::string_view name,
                                 const CallArgs& args);

// Python-like helpers shared with the interpreter.
// Items a `for` loop (or list()) sees: list items, dict keys, str chars;
// Undefined iterates as empty. Other types are an error.
absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
// jinja2 environment.getattr / getitem; Undefined input is an error.
absl::StatusOr<Value> GetAttr(const Value& obj, absl::string_view name);
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
// The error jinja2 raises when an Undefined is used.
absl::Status UndefinedError(const Value& undefined);
// Python `needle in haystack`.
absl::StatusOr<bool> Contains(const Value& haystack, const Value& needle);
// Python binary operator `op` (+ - * / // % ** ~). String or list
// repetition producing more than `max_bytes` bytes/items is an error.
absl::StatusOr<Value> BinaryOp(absl::string_view op, const Value& a,
                               const Value& b, size_t max_bytes);
// Python <, with TypeError for unorderable types. Returns -1/0/1.
absl::StatusOr<int> Compare(const Value& a, const Value& b);

}  // namespace pdserve::jinja

#endif  // PDSERVE_SERVER_CHAT_JINJA_BUILTINS_H_
