// The OpenAI chat API's tool calling and structured output, translated onto
// GenerateRequest: tools / tool_choice, assistant tool_calls and
// reasoning_content, role "tool" results, response_format (json_object,
// json_schema), vLLM's structured_outputs / guided_* (json, regex, choice,
// grammar), max_reasoning_tokens and enable_thinking; and the reply's
// message / delta JSON with reasoning_content and tool_calls. Pure.
#ifndef PDSERVE_SERVER_FRONTEND_OPENAI_TOOLS_H_
#define PDSERVE_SERVER_FRONTEND_OPENAI_TOOLS_H_

#include "absl/status/status.h"
#include "server/frontend/api_types.h"

namespace pdserve::frontend {

// An OpenAI message's tool_calls, tool_call_id and reasoning_content into
// `out` (`key`: "messages[i]"). INVALID_ARGUMENT naming the field.
absl::Status ParseMessageTools(const Json& message, const std::string& key,
                               v1::ChatMessage* out);

// tools, tool_choice, response_format, structured_outputs / guided_*,
// max_reasoning_tokens, enable_thinking, include_reasoning of a chat request.
absl::Status ParseChatGuidance(const Json& body, v1::GenerateRequest* req);

// {"content", "reasoning_content", "tool_calls"} of a chat message (`whole`)
// or a stream delta.
Json ChatMessageJson(const v1::Delta& delta, bool whole);

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_OPENAI_TOOLS_H_
