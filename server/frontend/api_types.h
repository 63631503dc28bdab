// Types the HTTP API translators share (OpenAI and Anthropic): a request
// translated onto the public GenerateRequest, an API error, typed reads of
// JSON request fields with messages that start with the field's name, and
// the way each API formats its responses (ApiFormat). Pure: no IO, no
// clock (the creation time is passed in).
#ifndef PDSERVE_SERVER_FRONTEND_API_TYPES_H_
#define PDSERVE_SERVER_FRONTEND_API_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "pdserve/v1/api.pb.h"
#include "server/tokenizer/tokenizer.h"

namespace pdserve::frontend {

// Insertion-ordered: request JSON keeps its key order (tool schemas reach
// the chat template as the client wrote them), responses keep theirs.
using Json = nlohmann::ordered_json;

// Compact JSON text; invalid UTF-8 in strings becomes U+FFFD.
std::string DumpJson(const Json& j);

// Parallel samples one HTTP request may ask for (n).
constexpr int kMaxParallelSamples = 16;

// An HTTP generation request on the shared request path: one
// GenerateRequest per prompt (a completions request may carry several), n
// samples of each (sample i of a seeded request uses seed + i).
struct ApiRequest {
  std::vector<v1::GenerateRequest> prompts;
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool seeded = false;         // a seed was given (else each sample draws one)
};

// An error as the HTTP APIs report it: {"error": {message, type, param,
// code}} for OpenAI; {"type": "error", "error": {type, message}} for
// Anthropic.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the request field, when one is to blame
  std::string code;   // e.g. "model_not_found"; may be empty
};

// The HTTP status, OpenAI error type and param of an absl::Status from the
// shared request path. `during_validation`: the status came from parsing or
// PrepareRequest (RESOURCE_EXHAUSTED there is a prompt over the capacity:
// 400), else from the scheduler (RESOURCE_EXHAUSTED: queue full, 429;
// UNAVAILABLE: 503). The param is the leading field path of the message
// without "sampling." ("sampling.top_p 2 must be ..." -> "top_p"), and so is
// the message; an unknown model is 404 model_not_found.
ApiError ToApiError(const absl::Status& status, bool during_validation);

// "invalid_request_error", "authentication_error", "not_found_error",
// "rate_limit_error", "overloaded_error", "api_error" by status.
std::string ErrorType(int status);

// Typed reads of optional fields of a JSON object: absent or null leaves
// *out empty; a wrong type is INVALID_ARGUMENT "<key> must be <type>, got
// <what>". Integer accepts integral floats (2.0).
absl::Status GetNumber(const Json& obj, const char* key,
                       std::optional<double>* out);
absl::Status GetInteger(const Json& obj, const char* key,
                        std::optional<int64_t>* out);
absl::Status GetBool(const Json& obj, const char* key,
                     std::optional<bool>* out);
absl::Status GetString(const Json& obj, const char* key,
                       std::optional<std::string>* out);
// A string or a list of strings (stop, stop_sequences) into `out`.
absl::Status GetStringList(const Json& obj, const char* key,
                           google::protobuf::RepeatedPtrField<std::string>* out);
// The JSON type name for messages ("string", "number", "object", ...).
std::string JsonTypeName(const Json& value);

// Parses a request body: INVALID_ARGUMENT "the request body is not valid
// JSON: ..." or "... must be a JSON object".
absl::StatusOr<Json> ParseBody(const std::string& body);

// What a response is stamped with.
struct ResponseMeta {
  std::string id;     // "chatcmpl-7", "cmpl-7", "msg_7"
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// One choice of a finished (or accumulating) response: all its deltas
// merged (text, token ids, logprobs, alternatives) and its final.
struct ChoiceResult {
  v1::Delta merged;
  v1::Final final;
};
// Appends `delta` to `merged` (text and reasoning concatenated, the lists
// extended, tool-call pieces merged into one entry per call index).
void MergeDelta(const v1::Delta& delta, v1::Delta* merged);

// How one endpoint formats its answers. SSE output is complete events
// ("data: {...}\n\n", or "event: x\ndata: {...}\n\n" for Anthropic).
// One instance formats one response; its caller serializes the calls (an
// Anthropic stream keeps which content block is open).
class ApiFormat {
 public:
  virtual ~ApiFormat() = default;
  // Events before the first delta, for `choices` choices.
  virtual std::string StreamStart(const ResponseMeta& meta, int choices,
                                  int32_t prompt_tokens) const = 0;
  // Events for one delta of choice `index`.
  virtual std::string StreamDelta(const ResponseMeta& meta, int index,
                                  const v1::Delta& delta) const = 0;
  // Events when choice `index` finished.
  virtual std::string StreamFinal(const ResponseMeta& meta, int index,
                                  const v1::Final& final) const = 0;
  // Events after every choice finished; `usage` is the request's total.
  virtual std::string StreamEnd(const ResponseMeta& meta,
                                const v1::Final& last,
                                const v1::Usage& usage) const = 0;
  // An error after the stream started.
  virtual std::string StreamError(const ApiError& error) const = 0;
  // The non-streaming body.
  virtual Json Complete(const ResponseMeta& meta,
                        const std::vector<ChoiceResult>& choices,
                        const v1::Usage& usage) const = 0;
  // The body of an error response.
  virtual Json ErrorBody(const ApiError& error) const = 0;
};

// {"error": {"message", "type", "param", "code"}} (param/code null when
// empty).
Json OpenAiErrorBody(const ApiError& error);

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_API_TYPES_H_
