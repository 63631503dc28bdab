// Chat templates: turns a list of chat messages into the prompt text a model
// was trained on, by rendering the model's own Jinja template (GGUF
// `tokenizer.chat_template` or tokenizer_config.json `chat_template`) the
// way Hugging Face transformers' apply_chat_template(tokenize=False) does.
//
// The output is text: special-token strings inside it ("<|im_start|>") are
// meant to be tokenized with special-token parsing ON, while message
// content is only ever data to the template (never evaluated), so a user
// typing "{{ x }}" or "<|im_end|>" gets exactly those characters in the
// prompt; the tokenizer is what keeps user-typed special-token text from
// becoming control tokens.
#ifndef PDSERVE_SERVER_CHAT_CHAT_TEMPLATE_H_
#define PDSERVE_SERVER_CHAT_CHAT_TEMPLATE_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "server/chat/control_tokens.h"
#include "server/chat/jinja/template.h"

namespace pdserve {

// One tool call made by an assistant turn, as the template sees it:
// {"id": id (omitted when empty), "type": "function",
//  "function": {"name": name, "arguments": arguments}}.
struct ChatToolCall {
  std::string id;
  std::string name;
  // A JSON object (templates render it with tojson) or a JSON string (the
  // raw argument text as OpenAI clients send it; templates print it as is).
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
};

// One message. The template sees a dict with keys role, content, and
// reasoning_content / tool_calls / tool_call_id / name only when set; when
// reasoning_content is set it is also exposed as "thinking" (as
// transformers >= 5 does for templates that read that name).
// One part of a message's content: text, or an image (rendered by the
// template as its placeholder).
struct ChatContentPart {
  bool image = false;
  std::string text;  // when !image
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  // When non-empty, the template's message.content is this list of
  // {"type": "text", "text": ...} / {"type": "image"} items instead.
  std::vector<ChatContentPart> parts;
  std::optional<std::string> reasoning_content;
  std::vector<ChatToolCall> tool_calls;
  std::optional<std::string> tool_call_id;
  std::optional<std::string> name;
};

struct ChatRenderOptions {
  // Append the header that starts the assistant's reply.
  bool add_generation_prompt = true;
  // Passed to the template only when set (Qwen3: false adds an empty
  // <think></think> block; unset and true let the model think).
  std::optional<bool> enable_thinking;
  // Tool JSON schemas, or null for none (the template sees `tools` = None).
  nlohmann::ordered_json tools = nullptr;
  // More template variables (e.g. "date_string"); they override the defaults
  // above and the special tokens, like apply_chat_template's **kwargs.
  std::map<std::string, nlohmann::ordered_json> extra_variables;
  // Clock reading for templates that call strftime_now() (formatted in UTC).
  std::optional<absl::Time> now;
  jinja::RenderLimits limits;
};

// A compiled chat template. Immutable; Render is const and thread-safe.
class ChatTemplate {
 public:
  // The template used when a model ships none: ChatML, as SmolLM2/Qwen use
  // ("<|im_start|>{role}\n{content}<|im_end|>\n" per message, then
  // "<|im_start|>assistant\n" for the generation prompt), without any
  // default system prompt.
  static const char kChatMlTemplate[];

  // Parses `source` once. An empty source selects kChatMlTemplate. A
  // template using an unsupported Jinja construct is an InvalidArgument
  // error naming line, column and construct. `bos_token` / `eos_token` are
  // the template variables of the same names (empty: left undefined, as
  // transformers does for tokenizers without one).
  static absl::StatusOr<ChatTemplate> Create(std::string source,
                                             std::string bos_token,
                                             std::string eos_token);

  // Renders the prompt. Errors: unknown role, the template's own
  // raise_exception (e.g. roles not alternating), undefined values the
  // template uses, render limits; all InvalidArgument (FailedPrecondition
  // when strftime_now is called without options.now).
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     const ChatRenderOptions& options) const;

  // Render for tokenization without control-token injection: occurrences of
  // `control_tokens` (the tokenizer's special/added token strings, e.g.
  // "<|im_end|>") inside request strings come back as user_text segments,
  // to be tokenized with special-token parsing OFF; all other segments are
  // tokenized with it ON. This is transformers'
  // apply_chat_template(sanitize_control_tokens=True): encoding the segments
  // gives its ids. The concatenated texts equal Render()'s output except
  // where the template runs string operations across a marked token (Qwen3
  // strips "\n" around <think> in assistant turns; the markers stop that),
  // and except for U+F0000/U+F0001 in requests, which are dropped.
  absl::StatusOr<std::vector<PromptSegment>> RenderSegments(
      const std::vector<ChatMessage>& messages, const ChatRenderOptions& options,
      const std::vector<std::string>& control_tokens) const;

  // A tokenizer's added token, for ControlTokens().
  struct AddedToken {
    std::string text;
    bool special = false;
  };
  // The control tokens RenderSegments should protect, chosen as transformers
  // does by default: special tokens, plus added tokens that occur in the
  // template's literal text (e.g. Qwen3's <think>, <tool_call>), except
  // whitespace-only ones.
  std::vector<std::string> ControlTokens(const std::vector<AddedToken>& added) const;

  bool is_fallback() const { return fallback_; }
  const std::string& source() const { return source_; }

 private:
  ChatTemplate(jinja::Template t, std::string source, std::string bos,
               std::string eos, bool fallback)
      : template_(std::move(t)), source_(std::move(source)),
        bos_token_(std::move(bos)), eos_token_(std::move(eos)),
        fallback_(fallback) {}

  absl::StatusOr<jinja::ValueDict> Variables(
      const std::vector<ChatMessage>& messages, const ChatRenderOptions& options,
      const ControlTokenSet* mark) const;

  jinja::Template template_;
  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  bool fallback_;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVER_CHAT_CHAT_TEMPLATE_H_
