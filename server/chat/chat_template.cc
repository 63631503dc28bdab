#include "server/chat/chat_template.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pdserve {
namespace {

using jinja::Value;
using jinja::ValueDict;

absl::StatusOr<Value> MessageValue(const ChatMessage& m, size_t index,
                                   const ControlTokenSet* mark) {
  auto str = [mark](const std::string& s) {
    return Value::String(mark != nullptr ? mark->Mark(s) : s);
  };
  if (m.role != "system" && m.role != "user" && m.role != "assistant" &&
      m.role != "tool") {
    return absl::InvalidArgumentError(absl::StrCat(
        "message ", index, " has role '", m.role,
        "'; expected system, user, assistant or tool"));
  }
  ValueDict d;
  if (m.reasoning_content.has_value()) {
    d.Set("thinking", str(*m.reasoning_content));
  }
  d.Set("role", Value::String(m.role));
  if (m.parts.empty()) {
    d.Set("content", str(m.content));
  } else {
    std::vector<Value> parts;
    for (const ChatContentPart& p : m.parts) {
      ValueDict item;
      item.Set("type", Value::String(p.image ? "image" : "text"));
      if (!p.image) item.Set("text", str(p.text));
      parts.push_back(Value::Dict(std::move(item)));
    }
    d.Set("content", Value::List(std::move(parts)));
  }
  if (m.reasoning_content.has_value()) {
    d.Set("reasoning_content", str(*m.reasoning_content));
  }
  if (!m.tool_calls.empty()) {
    std::vector<Value> calls;
    for (const ChatToolCall& c : m.tool_calls) {
      absl::StatusOr<Value> args = Value::FromJson(c.arguments);
      if (!args.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "message ", index, " tool call '", c.name, "': ", args.status().message()));
      }
      ValueDict fn;
      fn.Set("name", str(c.name));
      fn.Set("arguments", mark != nullptr ? mark->MarkValue(*args) : *std::move(args));
      ValueDict call;
      if (!c.id.empty()) call.Set("id", str(c.id));
      call.Set("type", Value::String("function"));
      call.Set("function", Value::Dict(std::move(fn)));
      calls.push_back(Value::Dict(std::move(call)));
    }
    d.Set("tool_calls", Value::List(std::move(calls)));
  }
  if (m.tool_call_id.has_value()) d.Set("tool_call_id", str(*m.tool_call_id));
  if (m.name.has_value()) d.Set("name", str(*m.name));
  return Value::Dict(std::move(d));
}

}  // namespace

const char ChatTemplate::kChatMlTemplate[] =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

absl::StatusOr<ChatTemplate> ChatTemplate::Create(std::string source,
                                                  std::string bos_token,
                                                  std::string eos_token) {
  bool fallback = source.empty();
  if (fallback) source = kChatMlTemplate;
  absl::StatusOr<jinja::Template> t = jinja::Template::Parse(source);
  if (!t.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported chat template: ", t.status().message()));
  }
  return ChatTemplate(*std::move(t), std::move(source), std::move(bos_token),
                      std::move(eos_token), fallback);
}

absl::StatusOr<ValueDict> ChatTemplate::Variables(
    const std::vector<ChatMessage>& messages, const ChatRenderOptions& options,
    const ControlTokenSet* mark) const {
  auto marked = [mark](Value v) { return mark != nullptr ? mark->MarkValue(v) : v; };
  ValueDict vars;
  if (!bos_token_.empty()) vars.Set("bos_token", Value::String(bos_token_));
  if (!eos_token_.empty()) vars.Set("eos_token", Value::String(eos_token_));
  std::vector<Value> list;
  list.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    absl::StatusOr<Value> m = MessageValue(messages[i], i, mark);
    if (!m.ok()) return m.status();
    list.push_back(*std::move(m));
  }
  vars.Set("messages", Value::List(std::move(list)));
  absl::StatusOr<Value> tools = Value::FromJson(options.tools);
  if (!tools.ok()) return tools.status();
  vars.Set("tools", marked(*std::move(tools)));
  vars.Set("documents", Value::None());
  vars.Set("add_generation_prompt", Value::Bool(options.add_generation_prompt));
  if (options.enable_thinking.has_value()) {
    vars.Set("enable_thinking", Value::Bool(*options.enable_thinking));
  }
  for (const auto& [name, json] : options.extra_variables) {
    absl::StatusOr<Value> v = Value::FromJson(json);
    if (!v.ok()) return v.status();
    vars.Set(name, marked(*std::move(v)));
  }
  return vars;
}

absl::StatusOr<std::string> ChatTemplate::Render(
    const std::vector<ChatMessage>& messages,
    const ChatRenderOptions& options) const {
  absl::StatusOr<ValueDict> vars = Variables(messages, options, nullptr);
  if (!vars.ok()) return vars.status();
  jinja::RenderOptions ro;
  ro.limits = options.limits;
  ro.now = options.now;
  return template_.Render(*vars, ro);
}

std::vector<std::string> ChatTemplate::ControlTokens(
    const std::vector<AddedToken>& added) const {
  std::string literals = template_.LiteralText();
  std::vector<std::string> out;
  for (const AddedToken& t : added) {
    bool whitespace = std::all_of(t.text.begin(), t.text.end(), [](char c) {
      return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
    });
    if (t.text.empty()) continue;
    if (t.special || (!whitespace && literals.find(t.text) != std::string::npos)) {
      out.push_back(t.text);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

absl::StatusOr<std::vector<PromptSegment>> ChatTemplate::RenderSegments(
    const std::vector<ChatMessage>& messages, const ChatRenderOptions& options,
    const std::vector<std::string>& control_tokens) const {
  ControlTokenSet set(control_tokens);
  absl::StatusOr<ValueDict> vars = Variables(messages, options, &set);
  if (!vars.ok()) return vars.status();
  jinja::RenderOptions ro;
  ro.limits = options.limits;
  ro.now = options.now;
  absl::StatusOr<std::string> out = template_.Render(*vars, ro);
  if (!out.ok()) return out.status();
  return set.Split(*out);
}

}  // namespace pdserve
