#include "server/frontend/anthropic_api.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

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

const char* StopReason(const v1::Final& f) {
  if (f.finish_reason() == v1::FINISH_REASON_LENGTH) return "max_tokens";
  if (!f.stop_string().empty()) return "stop_sequence";
  return "end_turn";
}

Json StopSequence(const v1::Final& f) {
  return f.stop_string().empty() ? Json(nullptr) : Json(f.stop_string());
}

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
           Event("content_block_start",
                 {{"type", "content_block_start"},
                  {"index", 0},
                  {"content_block", {{"type", "text"}, {"text", ""}}}}) +
           Event("ping", {{"type", "ping"}});
  }
  std::string StreamDelta(const ResponseMeta&, int,
                          const v1::Delta& delta) const override {
    if (delta.text().empty()) return "";
    return Event("content_block_delta",
                 {{"type", "content_block_delta"},
                  {"index", 0},
                  {"delta", {{"type", "text_delta"}, {"text", delta.text()}}}});
  }
  std::string StreamFinal(const ResponseMeta&, int,
                          const v1::Final&) const override {
    return "";
  }
  std::string StreamEnd(const ResponseMeta&, const v1::Final& last,
                        const v1::Usage& usage) const override {
    return Event("content_block_stop",
                 {{"type", "content_block_stop"}, {"index", 0}}) +
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
    return Json{
        {"id", meta.id},
        {"type", "message"},
        {"role", "assistant"},
        {"model", meta.model},
        {"content",
         Json::array({Json{{"type", "text"}, {"text", c.merged.text()}}})},
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
    v1::ChatMessage* out = req.add_messages();
    out->set_role(*role);
    auto content = m.find("content");
    if (content == m.end()) {
      return absl::InvalidArgumentError(mk + ".content is required");
    }
    PDSERVE_RETURN_IF_ERROR(
        BlocksText(*content, mk + ".content", out->mutable_content()));
  }
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
