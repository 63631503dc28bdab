// The OpenAI API's translation (pure; no IO): /v1/chat/completions and
// /v1/completions bodies onto the public GenerateRequest, and the
// chat.completion / text_completion responses and SSE chunks built from the
// shared path's Delta and Final messages.
//
// Parameters: model, messages (content a string or text parts; roles system,
// developer (= system), user, assistant, tool), prompt (a string, a list of
// strings, token ids or lists of token ids), max_tokens /
// max_completion_tokens, temperature (default 1), top_p, top_k (-1 = off),
// min_p, presence_penalty, frequency_penalty, repetition_penalty, seed, stop,
// n, logprobs / top_logprobs (completions: logprobs = the number of
// alternatives), logit_bias, user, ignore_eos, chat_template_kwargs,
// priority (vLLM's: lower runs first), stream, stream_options.include_usage.
// Other fields are ignored. Values are validated on the shared path
// (PrepareRequest), with the same rules and numbers as the gRPC API.
#ifndef PDSERVE_SERVER_FRONTEND_OPENAI_API_H_
#define PDSERVE_SERVER_FRONTEND_OPENAI_API_H_

#include <memory>

#include "absl/status/statusor.h"
#include "server/frontend/api_types.h"

namespace pdserve::frontend {

// INVALID_ARGUMENT for wrong JSON types and for what only HTTP has (n out of
// [1, kMaxParallelSamples], top_logprobs without logprobs, unsupported
// content parts), naming the field.
absl::StatusOr<ApiRequest> ParseChatRequest(const Json& body);
absl::StatusOr<ApiRequest> ParseCompletionRequest(const Json& body);

// Messages ([{role, content, name}]) onto `req`; `key` names the field in
// errors. Shared with /tokenize.
absl::Status ParseChatMessages(const Json& messages, const char* key,
                               v1::GenerateRequest* req);

// Formats for the two endpoints; `tokenizer` (token texts of logprobs) must
// outlive them.
std::unique_ptr<ApiFormat> MakeChatFormat(const Tokenizer& tokenizer,
                                          bool include_usage);
std::unique_ptr<ApiFormat> MakeCompletionFormat(const Tokenizer& tokenizer,
                                                bool include_usage);

// OpenAI's usage object, with prompt_tokens_details.cached_tokens.
Json UsageJson(const v1::Usage& usage);

// GET /v1/models.
Json ModelList(const v1::ModelInfo& model, int64_t created);

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_OPENAI_API_H_
