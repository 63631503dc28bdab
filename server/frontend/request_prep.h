// Validation and preparation of a public Generate request: checks every
// field (naming the field and the numbers), renders chat messages with the
// model's template, tokenizes, and sizes the request against the sequence
// capacity. Pure: no IO, no clock; thread-safe (const inputs only).
#ifndef PDSERVE_SERVER_FRONTEND_REQUEST_PREP_H_
#define PDSERVE_SERVER_FRONTEND_REQUEST_PREP_H_

#include <cstdint>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pdserve/v1/api.pb.h"
#include "engine/grammar/grammar.h"
#include "engine/model_config.h"
#include "server/frontend/image_prep.h"
#include "server/chat/chat_template.h"
#include "server/chat/output_parser.h"
#include "server/tokenizer/tokenizer.h"

namespace pdserve::frontend {

// What the front end knows of the served model. The tokenizer and template
// are owned here and immutable after construction.
struct ModelContext {
  std::string name;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;  // fallback ChatML when none
  // Special/added token texts that only the template may insert; in request
  // strings they are tokenized as plain text (no forged turn boundaries).
  std::vector<std::string> control_tokens;
  // The sequence capacity in tokens: the engine's --max-seq-len
  // (EngineInfo.max_seq_len, through the scheduler's status), written by the
  // front end process whenever the scheduler reports a (re)connected engine;
  // read once per request.
  std::atomic<int64_t> max_seq_len{0};
  // Compiles requests' constraints (validation; the engine compiles its own
  // copy). Thread-safe.
  std::unique_ptr<grammar::GrammarCompiler> grammar;
  // The reply formats of the model family (from the template, or flags).
  ToolCallFormat tool_format = ToolCallFormat::kHermes;
  ReasoningFormat reasoning_format = ReasoningFormat::kNone;
  // The tokens of "<think>" and "</think>" (empty without reasoning).
  std::vector<int32_t> think_start_ids, think_end_ids;
  // Vision-language models: the vision tower's config (placeholder ids,
  // processor sizes; present() false for text-only models), and the
  // limits on a request's images.
  VisionConfig vision;
  ImageLimits image_limits;
};

// Overrides of what LoadModelContext detects.
struct ModelContextOptions {
  std::optional<ToolCallFormat> tool_format;        // --tool-call-parser
  std::optional<ReasoningFormat> reasoning_format;  // --reasoning-parser
  int64_t grammar_compile_timeout_ms = 10000;       // --grammar-compile-timeout-ms
};

// Limits on request fields beyond the model's.
constexpr int kMaxStopStrings = 16;
constexpr int kMaxStopStringBytes = 256;
constexpr int kMaxLogitBias = 1024;   // sampling.logit_bias entries
constexpr int kMaxTopLogprobs = 20;   // top_logprobs (OpenAI's bound)

// A request ready for the scheduler.
struct PreparedRequest {
  std::vector<int32_t> prompt_ids;
  int32_t max_new_tokens = 0;
  std::vector<std::string> stop_strings;
  std::vector<int32_t> stop_ids;
  // The constraint the engine applies (the request's, or the one that
  // forces a tool call), compiled once here; and the reasoning control.
  std::optional<v1::GrammarConstraint> constraint;
  std::optional<v1::ReasoningControl> reasoning;
  // How the reply is parsed (reasoning, tool calls); call_id_seed is the
  // stream's to set.
  OutputParserOptions parser;
  // The prompt's images in order; prompt_ids hold their expanded
  // placeholders.
  std::vector<v1::ImageInput> images;
};

// Parses a serialized GenerateRequest. When protobuf refuses it, finds the
// string field with invalid UTF-8 and returns INVALID_ARGUMENT naming it
// ("messages[1].content: invalid UTF-8 at byte offset 4 (byte 0xFF)"), or
// INVALID_ARGUMENT "malformed request" with its size.
absl::StatusOr<v1::GenerateRequest> ParseGenerateRequest(const std::string& wire);

// Builds the model context: loads the tokenizer from `tokenizer_path` and
// compiles the chat template the vocabulary carries (ChatML when none).
absl::StatusOr<std::unique_ptr<ModelContext>> LoadModelContext(
    const std::string& tokenizer_path, const std::string& name,
    const ModelContextOptions& options = {});

// INVALID_ARGUMENT: neither or both of messages/prompt, empty content of
// every message, unknown role, invalid UTF-8 (field and byte offset),
// max_tokens < 0 or above the capacity, temperature < 0 or not finite,
// top_p/min_p outside [0, 1], top_k < 0, repetition_penalty < 0,
// presence/frequency_penalty outside [-2, 2], more than kMaxLogitBias
// logit_bias entries or one outside the vocabulary or [-100, 100],
// top_logprobs outside [0, kMaxTopLogprobs], too many or too long stop
// strings, an unknown model name, chat_template_kwargs that are not an
// object. Messages start with the field's path in GenerateRequest
// ("sampling.top_p 1.5 must be in [0, 1]").
// Tools (tool_prep.h: ToolsJson), tool_calls arguments that are not JSON
// objects, tools or max_reasoning_tokens without messages, a negative
// max_reasoning_tokens, a constraint that does not compile ("sampling.
// constraint: json_schema does not compile: ...") or comes with a forced
// tool choice: INVALID_ARGUMENT.
// Images (messages[].parts): PrepareRequestImages' errors (image_prep.h);
// a message with both content and parts.
// RESOURCE_EXHAUSTED: prompt longer than the sequence capacity, or too
// many constraints compiling at once.
absl::StatusOr<PreparedRequest> PrepareRequest(const v1::GenerateRequest& req,
                                               const ModelContext& model);

// The prompt text a chat request renders to (messages, tools, template
// kwargs, with the generation prompt), as PrepareRequest tokenizes it.
absl::StatusOr<std::string> RenderChatPrompt(const v1::GenerateRequest& req,
                                             const ModelContext& model);

// The Tokenize RPC and POST /tokenize: `text` as ids, BOS first when
// add_bos and the model has one; parse_special turns special-token text into
// its id. INVALID_ARGUMENT for invalid UTF-8.
absl::StatusOr<std::vector<int32_t>> TokenizeText(const ModelContext& model,
                                                  const std::string& text,
                                                  bool add_bos,
                                                  bool parse_special);

// The Detokenize RPC and POST /detokenize: invalid UTF-8 runs become U+FFFD.
// INVALID_ARGUMENT "token_ids[i] = N is outside the vocabulary [0, V)".
absl::StatusOr<std::string> DetokenizeIds(const ModelContext& model,
                                          absl::Span<const int32_t> ids);

// ListModels and GET /v1/models: the served name, vocabulary, capacity.
v1::ModelInfo DescribeModel(const ModelContext& model);

// The name a model is served under when none is given
// (--served-model-name): the file's stem ("SmolLM2-135M-Instruct.Q4_1" for
// .../SmolLM2-135M-Instruct.Q4_1.gguf), a folder's own name.
std::string DefaultServedModelName(const std::string& model_path);

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_REQUEST_PREP_H_
