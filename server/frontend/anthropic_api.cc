#include "server/frontend/anthropic_api.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/frontend/image_prep.h"

namespace pdserve::frontend {
namespace {

std::string Event(const char* name, const Json& data) {
  return absl::StrCat("event: ", name, "\ndata: ", DumpJson(data), "\n\n");
}

// A string, or a list of {"type": "text", "text"} blocks, as text.
absl::Status BlocksText(const Json& v, const std::string& key,
                        std::string* out) {
  if (v.is_string()) {
    *out = v.get<std::string>();
    return absl::OkStatus();
  }
  if (!v.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, " must be a string or a list of content blocks, got ",
        JsonTypeName(v)));
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string bk = absl::StrCat(key, "[", i, "]");
    if (!v[i].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(bk, " must be an object, got ", JsonTypeName(v[i])));
    }
    std::optional<std::string> type, text;
    PDSERVE_RETURN_IF_ERROR(GetString(v[i], "type", &type));
    if (type.value_or("") != "text") {
      return absl::InvalidArgumentError(
          absl::StrCat(bk, ".type '", type.value_or(""),
                       "' is not supported (only text blocks)"));
    }
    PDSERVE_RETURN_IF_ERROR(GetString(v[i], "text", &text));
    if (!out->empty()) out->push_back('\n');
    out->append(text.value_or(""));
  }
  return absl::OkStatus();
}

// An image block's source as a data: URL: {"type": "base64", "media_type",
// "data"}; "url" sources are refused (nothing is fetched).
absl::StatusOr<std::string> ImageBlockUrl(const Json& block,
                                          const std::string& key) {
  auto src = block.find("source");
  if (src == block.end() || !src->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ".source must be an object"));
  }
  std::optional<std::string> type, media, data, url;
  PDSERVE_RETURN_IF_ERROR(GetString(*src, "type", &type));
  if (type.value_or("") == "url") {
    PDSERVE_RETURN_IF_ERROR(GetString(*src, "url", &url));
    PDSERVE_RETURN_IF_ERROR(
        CheckInlineImageUrl(url.value_or(""), key + ".source.url"));
    return *url;
  }
  if (type.value_or("") != "base64") {
    return absl::InvalidArgumentError(absl::StrCat(
        key, ".source.type '", type.value_or(""),
        "' is not supported (base64; url sources are not fetched)"));
  }
  PDSERVE_RETURN_IF_ERROR(GetString(*src, "media_type", &media));
  PDSERVE_RETURN_IF_ERROR(GetString(*src, "data", &data));
  if (!data.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ".source.data is required"));
  }
  return absl::StrCat("data:", media.value_or(""), ";base64,", *data);
}

// One turn's content: text (and thinking) blocks make one message;
// tool_use blocks are its tool calls; each tool_result block is a "tool"
// message of its own, before the turn's text.
absl::Status ParseTurn(const std::string& role, const Json& content,
                       const std::string& key, v1::GenerateRequest* req) {
  v1::ChatMessage turn;
  turn.set_role(role);
  if (!content.is_array()) {
    PDSERVE_RETURN_IF_ERROR(BlocksText(content, key, turn.mutable_content()));
    *req->add_messages() = std::move(turn);
    return absl::OkStatus();
  }
  bool any = false;
  std::vector<v1::ContentPart> parts;  // text and image blocks in order
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string bk = absl::StrCat(key, "[", i, "]");
    const Json& b = content[i];
    if (!b.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(bk, " must be an object, got ", JsonTypeName(b)));
    }
    std::optional<std::string> type;
    PDSERVE_RETURN_IF_ERROR(GetString(b, "type", &type));
    const std::string t = type.value_or("");
    if (t == "text") {
      std::optional<std::string> text;
      PDSERVE_RETURN_IF_ERROR(GetString(b, "text", &text));
      parts.emplace_back().set_text(text.value_or(""));
      any = true;
    } else if (t == "image" && role == "user") {
      auto url = ImageBlockUrl(b, bk);
      if (!url.ok()) return url.status();
      parts.emplace_back().mutable_image()->set_url(*std::move(url));
      any = true;
    } else if (t == "thinking" && role == "assistant") {
      std::optional<std::string> thinking;
      PDSERVE_RETURN_IF_ERROR(GetString(b, "thinking", &thinking));
      turn.mutable_reasoning_content()->append(thinking.value_or(""));
    } else if (t == "redacted_thinking" && role == "assistant") {
      continue;
    } else if (t == "tool_use" && role == "assistant") {
      std::optional<std::string> id, name;
      PDSERVE_RETURN_IF_ERROR(GetString(b, "id", &id));
      PDSERVE_RETURN_IF_ERROR(GetString(b, "name", &name));
      v1::ToolCall* call = turn.add_tool_calls();
      call->set_id(id.value_or(""));
      call->set_name(name.value_or(""));
      auto input = b.find("input");
      if (input != b.end() && !input->is_null() && !input->is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(
            bk, ".input must be an object, got ", JsonTypeName(*input)));
      }
      call->set_arguments(input == b.end() || input->is_null() ? "{}"
                                                               : DumpJson(*input));
      any = true;
    } else if (t == "tool_result" && role == "user") {
      std::optional<std::string> id;
      PDSERVE_RETURN_IF_ERROR(GetString(b, "tool_use_id", &id));
      v1::ChatMessage* result = req->add_messages();
      result->set_role("tool");
      result->set_tool_call_id(id.value_or(""));
      auto c = b.find("content");
      if (c != b.end() && !c->is_null()) {
        PDSERVE_RETURN_IF_ERROR(BlocksText(*c, bk + ".content", result->mutable_content()));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          bk, ".type '", t, "' is not supported in a ", role,
          " turn (text, image, thinking, tool_use, tool_result)"));
    }
  }
  SetContentFromParts(std::move(parts), &turn);
  if (any || turn.tool_calls_size() > 0) *req->add_messages() = std::move(turn);
  return absl::OkStatus();
}

// tools [{name, description, input_schema}], tool_choice {type: auto | any
// | tool | none, name}, thinking {type: enabled | disabled, budget_tokens}.
absl::Status ParseAnthropicTools(const Json& body, v1::GenerateRequest* req) {
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tools must be a list, got ", JsonTypeName(*it)));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& t = (*it)[i];
      const std::string key = absl::StrCat("tools[", i, "]");
      if (!t.is_object()) {
        return absl::InvalidArgumentError(
            absl::StrCat(key, " must be an object, got ", JsonTypeName(t)));
      }
      std::optional<std::string> name, description;
      PDSERVE_RETURN_IF_ERROR(GetString(t, "name", &name));
      PDSERVE_RETURN_IF_ERROR(GetString(t, "description", &description));
      v1::Tool* tool = req->add_tools();
      tool->set_name(name.value_or(""));
      tool->set_description(description.value_or(""));
      auto schema = t.find("input_schema");
      if (schema != t.end() && !schema->is_null()) {
        if (!schema->is_object()) {
          return absl::InvalidArgumentError(absl::StrCat(
              key, ".input_schema must be an object, got ", JsonTypeName(*schema)));
        }
        tool->set_parameters(DumpJson(*schema));
      }
    }
  }
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tool_choice must be an object, got ", JsonTypeName(*it)));
    }
    std::optional<std::string> type, name;
    PDSERVE_RETURN_IF_ERROR(GetString(*it, "type", &type));
    PDSERVE_RETURN_IF_ERROR(GetString(*it, "name", &name));
    v1::ToolChoice* c = req->mutable_tool_choice();
    const std::string t = type.value_or("auto");
    if (t == "any") {
      c->set_mode(v1::ToolChoice::MODE_REQUIRED);
    } else if (t == "none") {
      c->set_mode(v1::ToolChoice::MODE_NONE);
    } else if (t == "tool") {
      if (!name.has_value()) {
        return absl::InvalidArgumentError("tool_choice.name is required for type tool");
      }
      c->set_mode(v1::ToolChoice::MODE_FUNCTION);
      c->set_function(*name);
    } else if (t != "auto") {
      return absl::InvalidArgumentError(absl::StrCat(
          "tool_choice.type '", t, "' is not auto, any, tool or none"));
    }
  }
  if (auto it = body.find("thinking"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("thinking must be an object, got ", JsonTypeName(*it)));
    }
    std::optional<std::string> type;
    std::optional<int64_t> budget;
    PDSERVE_RETURN_IF_ERROR(GetString(*it, "type", &type));
    PDSERVE_RETURN_IF_ERROR(GetInteger(*it, "budget_tokens", &budget));
    auto* fields = req->mutable_chat_template_kwargs()->mutable_fields();
    if (type.value_or("") == "enabled") {
      (*fields)["enable_thinking"].set_bool_value(true);
      if (budget.has_value()) {
        if (*budget < 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "thinking.budget_tokens ", *budget, " must be >= 1"));
        }
        req->set_max_reasoning_tokens(
            static_cast<int32_t>(std::min<int64_t>(*budget, INT32_MAX)));
      }
    } else if (type.value_or("") == "disabled") {
      (*fields)["enable_thinking"].set_bool_value(false);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "thinking.type '", type.value_or(""), "' is not enabled or disabled"));
    }
  }
  return absl::OkStatus();
}

const char* StopReason(const v1::Final& f) {
  if (f.finish_reason() == v1::FINISH_REASON_LENGTH) return "max_tokens";
  if (f.finish_reason() == v1::FINISH_REASON_TOOL_CALLS) return "tool_use";
  if (!f.stop_string().empty()) return "stop_sequence";
  return "end_turn";
}

Json StopSequence(const v1::Final& f) {
  return f.stop_string().empty() ? Json(nullptr) : Json(f.stop_string());
}

// "toolu_..." for a parsed call id "call_...".
std::string ToolUseId(const std::string& call_id) {
  return "toolu_" + (call_id.rfind("call_", 0) == 0 ? call_id.substr(5) : call_id);
}

// A tool call's input: its arguments as a JSON object ({} when they do not
// parse, e.g. cut off by max_tokens).
Json ToolInput(const std::string& arguments) {
  Json j = Json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : Json::object();
}

// Streams content blocks: thinking, text and tool_use, each opened when its
// first piece comes (the previous one closed then).
class MessagesFormat : public ApiFormat {
 public:
  std::string StreamStart(const ResponseMeta& meta, int,
                          int32_t prompt_tokens) const override {
    Json message = {{"id", meta.id},
                    {"type", "message"},
                    {"role", "assistant"},
                    {"model", meta.model},
                    {"content", Json::array()},
                    {"stop_reason", nullptr},
                    {"stop_sequence", nullptr},
                    {"usage",
                     {{"input_tokens", prompt_tokens}, {"output_tokens", 0}}}};
    return Event("message_start",
                 {{"type", "message_start"}, {"message", std::move(message)}}) +
           Event("ping", {{"type", "ping"}});
  }
  std::string StreamDelta(const ResponseMeta&, int,
                          const v1::Delta& delta) const override {
    std::string out;
    if (!delta.reasoning_text().empty()) {
      out += Open(Block::kThinking, {{"type", "thinking"}, {"thinking", ""}});
      out += BlockDelta({{"type", "thinking_delta"}, {"thinking", delta.reasoning_text()}});
    }
    if (!delta.text().empty()) {
      out += Open(Block::kText, {{"type", "text"}, {"text", ""}});
      out += BlockDelta({{"type", "text_delta"}, {"text", delta.text()}});
    }
    for (const v1::ToolCallDelta& c : delta.tool_calls()) {
      if (!c.name().empty()) {
        out += Close();
        out += Open(Block::kToolUse, {{"type", "tool_use"},
                                      {"id", ToolUseId(c.id())},
                                      {"name", c.name()},
                                      {"input", Json::object()}});
      }
      if (!c.arguments().empty()) {
        out += BlockDelta({{"type", "input_json_delta"}, {"partial_json", c.arguments()}});
      }
    }
    return out;
  }
  std::string StreamFinal(const ResponseMeta&, int,
                          const v1::Final&) const override {
    return "";
  }
  std::string StreamEnd(const ResponseMeta&, const v1::Final& last,
                        const v1::Usage& usage) const override {
    std::string out;
    if (next_index_ == 0) out += Open(Block::kText, {{"type", "text"}, {"text", ""}});
    out += Close();
    return out +
           Event("message_delta",
                 {{"type", "message_delta"},
                  {"delta",
                   {{"stop_reason", StopReason(last)},
                    {"stop_sequence", StopSequence(last)}}},
                  {"usage", {{"output_tokens", usage.completion_tokens()}}}}) +
           Event("message_stop", {{"type", "message_stop"}});
  }
  std::string StreamError(const ApiError& error) const override {
    return Event("error", AnthropicErrorBody(error));
  }
  Json Complete(const ResponseMeta& meta,
                const std::vector<ChoiceResult>& choices,
                const v1::Usage& usage) const override {
    const ChoiceResult& c = choices.at(0);
    Json content = Json::array();
    if (!c.merged.reasoning_text().empty()) {
      content.push_back(Json{{"type", "thinking"},
                             {"thinking", c.merged.reasoning_text()},
                             {"signature", ""}});
    }
    if (!c.merged.text().empty() || c.merged.tool_calls_size() == 0) {
      content.push_back(Json{{"type", "text"}, {"text", c.merged.text()}});
    }
    for (const v1::ToolCallDelta& call : c.merged.tool_calls()) {
      content.push_back(Json{{"type", "tool_use"},
                             {"id", ToolUseId(call.id())},
                             {"name", call.name()},
                             {"input", ToolInput(call.arguments())}});
    }
    return Json{
        {"id", meta.id},
        {"type", "message"},
        {"role", "assistant"},
        {"model", meta.model},
        {"content", std::move(content)},
        {"stop_reason", StopReason(c.final)},
        {"stop_sequence", StopSequence(c.final)},
        {"usage",
         {{"input_tokens", usage.prompt_tokens()},
          {"output_tokens", usage.completion_tokens()},
          {"cache_read_input_tokens", usage.cached_tokens()}}}};
  }
  Json ErrorBody(const ApiError& error) const override {
    return AnthropicErrorBody(error);
  }

 private:
  enum class Block { kNone, kThinking, kText, kToolUse };

  // Opens a block of `type` unless one is open (a tool_use block always
  // opens anew: the caller closes the previous one).
  std::string Open(Block type, Json block) const {
    if (open_ == type && type != Block::kToolUse) return "";
    std::string out = Close();
    open_ = type;
    current_ = next_index_++;
    return out + Event("content_block_start", {{"type", "content_block_start"},
                                               {"index", current_},
                                               {"content_block", std::move(block)}});
  }
  std::string BlockDelta(Json delta) const {
    return Event("content_block_delta", {{"type", "content_block_delta"},
                                         {"index", current_},
                                         {"delta", std::move(delta)}});
  }
  std::string Close() const {
    if (open_ == Block::kNone) return "";
    open_ = Block::kNone;
    return Event("content_block_stop", {{"type", "content_block_stop"}, {"index", current_}});
  }

  // The stream's open block (calls are serialized by the caller).
  mutable Block open_ = Block::kNone;
  mutable int current_ = -1, next_index_ = 0;
};

}  // namespace

absl::StatusOr<ApiRequest> ParseMessagesRequest(const Json& body,
                                                bool for_count) {
  ApiRequest api;
  v1::GenerateRequest req;
  std::optional<std::string> model;
  PDSERVE_RETURN_IF_ERROR(GetString(body, "model", &model));
  if (model.has_value()) req.set_model(*model);
  if (auto it = body.find("system"); it != body.end() && !it->is_null()) {
    v1::ChatMessage* m = req.add_messages();
    m->set_role("system");
    PDSERVE_RETURN_IF_ERROR(BlocksText(*it, "system", m->mutable_content()));
  }
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array()) {
    return absl::InvalidArgumentError(
        it == body.end() ? std::string("messages is required")
                         : absl::StrCat("messages must be a list, got ",
                                        JsonTypeName(*it)));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    const std::string mk = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(mk, " must be an object, got ", JsonTypeName(m)));
    }
    std::optional<std::string> role;
    PDSERVE_RETURN_IF_ERROR(GetString(m, "role", &role));
    if (role.value_or("") != "user" && role.value_or("") != "assistant") {
      return absl::InvalidArgumentError(absl::StrCat(
          mk, ".role '", role.value_or(""), "' must be user or assistant"));
    }
    auto content = m.find("content");
    if (content == m.end()) {
      return absl::InvalidArgumentError(mk + ".content is required");
    }
    PDSERVE_RETURN_IF_ERROR(ParseTurn(*role, *content, mk + ".content", &req));
  }
  PDSERVE_RETURN_IF_ERROR(ParseAnthropicTools(body, &req));
  std::optional<int64_t> max_tokens, top_k;
  PDSERVE_RETURN_IF_ERROR(GetInteger(body, "max_tokens", &max_tokens));
  if (!for_count) {
    if (!max_tokens.has_value()) {
      return absl::InvalidArgumentError("max_tokens is required");
    }
    if (*max_tokens < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_tokens ", *max_tokens, " must be >= 1"));
    }
    req.set_max_tokens(static_cast<int32_t>(std::min<int64_t>(*max_tokens, INT32_MAX)));
  }
  std::optional<double> temperature, top_p;
  PDSERVE_RETURN_IF_ERROR(GetNumber(body, "temperature", &temperature));
  PDSERVE_RETURN_IF_ERROR(GetNumber(body, "top_p", &top_p));
  PDSERVE_RETURN_IF_ERROR(GetInteger(body, "top_k", &top_k));
  v1::SamplingParams* p = req.mutable_sampling();
  p->set_temperature(static_cast<float>(temperature.value_or(1.0)));
  p->set_top_p(static_cast<float>(top_p.value_or(1.0)));
  if (top_k.has_value()) {
    p->set_top_k(static_cast<int32_t>(
        std::clamp<int64_t>(*top_k, INT32_MIN, INT32_MAX)));
  }
  PDSERVE_RETURN_IF_ERROR(GetStringList(body, "stop_sequences", req.mutable_stop()));
  std::optional<bool> stream;
  PDSERVE_RETURN_IF_ERROR(GetBool(body, "stream", &stream));
  api.stream = stream.value_or(false);
  api.prompts.push_back(std::move(req));
  return api;
}

std::unique_ptr<ApiFormat> MakeMessagesFormat() {
  return std::make_unique<MessagesFormat>();
}

Json AnthropicErrorBody(const ApiError& e) {
  return Json{{"type", "error"},
              {"error", {{"type", ErrorType(e.status)}, {"message", e.message}}}};
}

}  // namespace pdserve::frontend
