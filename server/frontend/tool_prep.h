// The tools, tool choice, constraint and reasoning of a Generate request,
// prepared for the chat template, the engine and the reply parser: tools
// validated and shaped as the template expects, tool_choice required / a
// named function turned into a grammar constraint in the model family's
// call format, the constraint compiled (so a bad one is refused before the
// request takes capacity), and the reply parser's options. Pure (the
// compiler's cache aside); thread-safe.
#ifndef PDSERVE_SERVER_FRONTEND_TOOL_PREP_H_
#define PDSERVE_SERVER_FRONTEND_TOOL_PREP_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "pdserve/v1/api.pb.h"
#include "server/chat/output_parser.h"

namespace pdserve::frontend {

// Tools in one request, at most.
constexpr int kMaxTools = 128;

// The request's tools as the template sees them (OpenAI's shape, keys in
// this order): [{"type": "function", "function": {"name", "description",
// "parameters"}}]; null when there are none. INVALID_ARGUMENT: a name that
// is empty, repeated or not [A-Za-z0-9_.-]{1,64}, parameters that are not a
// JSON object, more than kMaxTools tools, a tool_choice that names a tool
// not given or asks for one when none are given.
absl::StatusOr<nlohmann::ordered_json> ToolsJson(const v1::GenerateRequest& req);

// The grammar that makes the reply one call in `format` of the named tool
// (MODE_FUNCTION) or any of the tools (MODE_REQUIRED); nullopt for the
// other modes. `tools` is ToolsJson's result.
std::optional<v1::GrammarConstraint> ForcedToolCall(
    const v1::ToolChoice& choice, const nlohmann::ordered_json& tools,
    ToolCallFormat format);

// A tool call's arguments text as the template's JSON object.
// INVALID_ARGUMENT "<key> is not a JSON object: ..." otherwise.
absl::StatusOr<nlohmann::ordered_json> ParseArguments(const std::string& text,
                                                      const std::string& key);

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_TOOL_PREP_H_
