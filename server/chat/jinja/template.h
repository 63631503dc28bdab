// A compiled Jinja template (the subset Hugging Face chat templates use),
// rendered with the semantics of transformers' apply_chat_template
// environment: jinja2 ImmutableSandboxedEnvironment, trim_blocks=True,
// lstrip_blocks=True, loop controls, the `generation` tag, and the globals
// raise_exception, strftime_now, namespace, dict, range.
#ifndef PDSERVE_SERVER_CHAT_JINJA_TEMPLATE_H_
#define PDSERVE_SERVER_CHAT_JINJA_TEMPLATE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/chat/jinja/value.h"

namespace pdserve::jinja {

struct ParsedTemplate;

// Bounds on one render; exceeding one is an InvalidArgument error whose
// message names the limit (no crash, no partial output).
struct RenderLimits {
  size_t max_output_bytes = size_t{256} << 20;  // per output buffer
  int64_t max_loop_iterations = 10'000'000;     // all loops, all iterations
  int max_call_depth = 64;                      // macro recursion
};

struct RenderOptions {
  RenderLimits limits;
  // The clock reading strftime_now() formats (in UTC). Unset: a template
  // that calls strftime_now fails to render, naming the call.
  std::optional<absl::Time> now;
};

// Immutable after Parse; Render is const and thread-safe (each render has
// its own scopes; the tree is only read). Cheap to copy (shared tree).
class Template {
 public:
  // Parses once. Syntax errors and constructs the interpreter does not
  // support are InvalidArgument errors naming line, column and construct.
  static absl::StatusOr<Template> Parse(absl::string_view source);

  // Renders with `variables` as the template's globals. Template errors
  // (raise_exception, undefined values used, type errors) are
  // InvalidArgument errors naming the line and column.
  absl::StatusOr<std::string> Render(const ValueDict& variables,
                                     const RenderOptions& options) const;

  // The template's literal text: every text block and string constant
  // (jinja2's TemplateData and str Const nodes), joined with '\0' so a
  // search cannot match across two of them.
  std::string LiteralText() const;

 private:
  explicit Template(std::shared_ptr<const ParsedTemplate> parsed)
      : parsed_(std::move(parsed)) {}
  std::shared_ptr<const ParsedTemplate> parsed_;
};

}  // namespace pdserve::jinja

#endif  // PDSERVE_SERVER_CHAT_JINJA_TEMPLATE_H_
