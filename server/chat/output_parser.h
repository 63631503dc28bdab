// Streaming parsers of a chat model's reply: reasoning kept apart from the
// answer (<think>...</think>) and tool calls in the model family's format,
// fed the reply's text in arbitrary pieces (token by token, or whole).
//
// The contract that makes streaming safe: for any split of a reply into
// pieces, concatenating every delta's content, reasoning and per-call name /
// arguments gives exactly what feeding the reply in one piece gives. A
// parser holds back only the bytes that could still start a marker
// ("<thi", "</tool_c") and releases them as soon as they cannot.
//
// Pure: no IO, no clock. Thread-compatible (one parser per reply).
#ifndef PDSERVE_SERVER_CHAT_OUTPUT_PARSER_H_
#define PDSERVE_SERVER_CHAT_OUTPUT_PARSER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace pdserve {

// How a model family writes tool calls.
enum class ToolCallFormat {
  kNone,        // no tool-call parsing: everything is content
  kHermes,      // Qwen3 / SmolLM3 / Hermes: <tool_call>{"name", "arguments"}</tool_call>
  kQwen3Coder,  // Qwen3.5 / Qwen3-Coder: <tool_call><function=N><parameter=P>v
                // </parameter></function></tool_call>
  kLlama3Json,  // Llama 3: {"name": N, "parameters": {...}} (optionally after
                // <|python_tag|>), several separated by ';'
};

// How a model family marks its reasoning.
enum class ReasoningFormat {
  kNone,   // no reasoning separation
  kThink,  // <think>...</think> (Qwen3, Qwen3.5, DeepSeek-R1, SmolLM3)
};

// "hermes", "qwen3_coder", "llama3_json", "none" (and the aliases qwen3,
// qwen3_xml, qwen35, llama3); INVALID_ARGUMENT names the choices.
absl::StatusOr<ToolCallFormat> ParseToolCallFormat(absl::string_view name);
// "think" (aliases qwen3, deepseek_r1), "none".
absl::StatusOr<ReasoningFormat> ParseReasoningFormat(absl::string_view name);
const char* ToolCallFormatName(ToolCallFormat format);
const char* ReasoningFormatName(ReasoningFormat format);

// The formats a chat template implies: <function= -> kQwen3Coder,
// <tool_call> -> kHermes, <|python_tag|> / "ipython" -> kLlama3Json, else
// kHermes (templates that render no tools); <think> -> kThink, else kNone.
ToolCallFormat DetectToolCallFormat(absl::string_view chat_template);
ReasoningFormat DetectReasoningFormat(absl::string_view chat_template);

// Whether a rendered prompt leaves the model inside its reasoning: after the
// last "<think>" there is no "</think>" (templates that open the block for
// the model, e.g. DeepSeek-R1, Qwen3.5 with thinking on).
bool PromptOpensReasoning(absl::string_view prompt);

// One tool call's piece of a delta: the first piece of a call carries its id
// and name; later pieces carry argument text only. `arguments` pieces of one
// call concatenate to its JSON arguments text.
struct ToolCallDelta {
  int index = 0;  // the call's position in the reply, from 0
  std::string id;    // first piece only
  std::string name;  // first piece only
  std::string arguments;
};

// What one Feed or Finish yields. Empty pieces are left out.
struct ParsedDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const {
    return content.empty() && reasoning.empty() && tool_calls.empty();
  }
};

struct OutputParserOptions {
  ReasoningFormat reasoning = ReasoningFormat::kNone;
  // The reply starts inside the reasoning (PromptOpensReasoning).
  bool starts_in_reasoning = false;
  // kNone when the request gave no tools.
  ToolCallFormat tool_calls = ToolCallFormat::kNone;
  // The request's tools (OpenAI shape: [{"type": "function", "function":
  // {"name", "parameters"}}]): kQwen3Coder reads parameter types from them.
  nlohmann::json tools = nlohmann::json::array();
  // Call ids are "call_" + a hash of this and the call's index (stable).
  std::string call_id_seed;
};

// A reply's streaming parser.
class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions options);
  ~OutputParser();
  OutputParser(const OutputParser&) = delete;
  OutputParser& operator=(const OutputParser&) = delete;

  // Parses the next piece of the reply.
  ParsedDelta Feed(absl::string_view text);
  // The reply ended: releases everything held back (an unterminated tool
  // call with a name still counts as a call).
  ParsedDelta Finish();
  // Tool calls seen so far.
  int tool_call_count() const;

 private:
  class Reasoning;
  class Tools;
  std::unique_ptr<Reasoning> reasoning_;
  std::unique_ptr<Tools> tools_;
};

// The stable id of call `index` for `seed` ("call_" + 24 hex digits).
std::string ToolCallId(absl::string_view seed, int index);

}  // namespace pdserve

#endif  // PDSERVE_SERVER_CHAT_OUTPUT_PARSER_H_
