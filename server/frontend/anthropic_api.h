// The Anthropic Messages API's translation (pure; no IO): POST /v1/messages
// and /v1/messages/count_tokens bodies onto the public GenerateRequest, and
// the message response and its streaming events (message_start,
// content_block_start, ping, content_block_delta, content_block_stop,
// message_delta, message_stop) from the shared path's Delta and Final.
//
// Parameters: model, max_tokens (required), messages (roles user and
// assistant; content a string or text blocks), system (a string or text
// blocks), stop_sequences, temperature (default 1), top_p, top_k, stream;
// metadata and other fields are ignored.
#ifndef PDSERVE_SERVER_FRONTEND_ANTHROPIC_API_H_
#define PDSERVE_SERVER_FRONTEND_ANTHROPIC_API_H_

#include <memory>

#include "absl/status/statusor.h"
#include "server/frontend/api_types.h"

namespace pdserve::frontend {

// `for_count`: count_tokens (max_tokens not required, nothing generated).
absl::StatusOr<ApiRequest> ParseMessagesRequest(const Json& body,
                                                bool for_count);

std::unique_ptr<ApiFormat> MakeMessagesFormat();

// {"type": "error", "error": {"type", "message"}}.
Json AnthropicErrorBody(const ApiError& error);

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_ANTHROPIC_API_H_
