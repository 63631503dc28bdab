#include "server/frontend/openai_api.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "server/frontend/image_prep.h"
#include "server/frontend/openai_tools.h"
#include "server/tokenizer/unicode.h"

namespace pdserve::frontend {
namespace {

std::string Sse(const Json& j) { return absl::StrCat("data: ", DumpJson(j), "\n\n"); }

Json FinishReasonJson(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_CANCELLED:
      return "abort";
    case v1::FINISH_REASON_ERROR:
      return "error";
    case v1::FINISH_REASON_TOOL_CALLS:
      return "tool_calls";
    default:
      return nullptr;
  }
}

Json StopReasonJson(const v1::Final& f) {
  return f.stop_string().empty() ? Json(nullptr) : Json(f.stop_string());
}

// The message content: a string, or a list of text and image_url parts
// (images only as data: URLs; SetContentFromParts).
absl::Status ContentParts(const Json& content, const std::string& key,
                          v1::ChatMessage* out) {
  if (content.is_null()) return absl::OkStatus();
  if (content.is_string()) {
    out->set_content(content.get<std::string>());
    return absl::OkStatus();
  }
  if (!content.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, " must be a string or a list of content parts, got ",
        JsonTypeName(content)));
  }
  std::vector<v1::ContentPart> parts;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string pk = absl::StrCat(key, "[", i, "]");
    if (!part.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(pk, " must be an object, got ", JsonTypeName(part)));
    }
    std::optional<std::string> type, text;
    PDSERVE_RETURN_IF_ERROR(GetString(part, "type", &type));
    if (type.value_or("text") == "image_url") {
      // {"image_url": {"url": ..., "detail": ...}} or {"image_url": "..."}.
      auto it = part.find("image_url");
      std::optional<std::string> url;
      if (it != part.end() && it->is_object()) {
        PDSERVE_RETURN_IF_ERROR(GetString(*it, "url", &url));
      } else if (it != part.end() && it->is_string()) {
        url = it->get<std::string>();
      }
      const std::string uk = pk + ".image_url.url";
      if (!url.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat(uk, " is required"));
      }
      PDSERVE_RETURN_IF_ERROR(CheckInlineImageUrl(*url, uk));
      parts.emplace_back().mutable_image()->set_url(*url);
      continue;
    }
    if (type.value_or("text") != "text") {
      return absl::InvalidArgumentError(absl::StrCat(
          pk, ".type '", *type, "' is not supported (text, image_url)"));
    }
    PDSERVE_RETURN_IF_ERROR(GetString(part, "text", &text));
    parts.emplace_back().set_text(text.value_or(""));
  }
  SetContentFromParts(std::move(parts), out);
  return absl::OkStatus();
}

// The fields chat and completions share.
absl::Status ParseCommon(const Json& body, v1::GenerateRequest* req,
                         ApiRequest* api) {
  std::optional<std::string> model;
  PDSERVE_RETURN_IF_ERROR(GetString(body, "model", &model));
  if (model.has_value()) req->set_model(*model);
  std::optional<int64_t> max_tokens, max_completion_tokens, top_k, seed, n,
      priority;
  PDSERVE_RETURN_IF_ERROR(GetInteger(body, "max_tokens", &max_tokens));
  PDSERVE_RETURN_IF_ERROR(
      GetInteger(body, "max_completion_tokens", &max_completion_tokens));
  if (max_completion_tokens.has_value()) max_tokens = max_completion_tokens;
  if (max_tokens.has_value()) {
    req->set_max_tokens(static_cast<int32_t>(
        std::clamp<int64_t>(*max_tokens, INT32_MIN, INT32_MAX)));
  }
  v1::SamplingParams* p = req->mutable_sampling();
  std::optional<double> temperature, top_p, min_p, presence, frequency,
      repetition;
  PDSERVE_RETURN_IF_ERROR(GetNumber(body, "temperature", &temperature));
  PDSERVE_RETURN_IF_ERROR(GetNumber(body, "top_p", &top_p));
  PDSERVE_RETURN_IF_ERROR(GetNumber(body, "min_p", &min_p));
  PDSERVE_RETURN_IF_ERROR(GetNumber(body, "presence_penalty", &presence));
  PDSERVE_RETURN_IF_ERROR(GetNumber(body, "frequency_penalty", &frequency));
  PDSERVE_RETURN_IF_ERROR(GetNumber(body, "repetition_penalty", &repetition));
  PDSERVE_RETURN_IF_ERROR(GetInteger(body, "top_k", &top_k));
  PDSERVE_RETURN_IF_ERROR(GetInteger(body, "seed", &seed));
  PDSERVE_RETURN_IF_ERROR(GetInteger(body, "n", &n));
  PDSERVE_RETURN_IF_ERROR(GetInteger(body, "priority", &priority));
  p->set_temperature(static_cast<float>(temperature.value_or(1.0)));
  p->set_top_p(static_cast<float>(top_p.value_or(1.0)));
  p->set_min_p(static_cast<float>(min_p.value_or(0.0)));
  p->set_presence_penalty(static_cast<float>(presence.value_or(0.0)));
  p->set_frequency_penalty(static_cast<float>(frequency.value_or(0.0)));
  p->set_repetition_penalty(static_cast<float>(repetition.value_or(1.0)));
  // vLLM's -1 (and 0) turn top_k off; other values go to validation.
  if (top_k.has_value() && *top_k != -1) {
    p->set_top_k(
        static_cast<int32_t>(std::clamp<int64_t>(*top_k, INT32_MIN, INT32_MAX)));
  }
  if (seed.has_value()) {
    p->set_seed(static_cast<uint64_t>(*seed));
    api->seeded = true;
  }
  if (n.has_value() && (*n < 1 || *n > kMaxParallelSamples)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "n ", *n, " must be in [1, ", kMaxParallelSamples, "]"));
  }
  api->n = static_cast<int>(n.value_or(1));
  // vLLM's priority: lower runs first; pdserve.v1's: higher runs first.
  if (priority.has_value()) {
    req->set_priority(static_cast<int32_t>(
        -std::clamp<int64_t>(*priority, -INT32_MAX, INT32_MAX)));
  }
  PDSERVE_RETURN_IF_ERROR(GetStringList(body, "stop", req->mutable_stop()));
  if (auto it = body.find("logit_bias");
      it != body.end() && !it->is_null()) {
    if (!it->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "logit_bias must be an object of token id -> bias, got ",
          JsonTypeName(*it)));
    }
    for (const auto& [key, value] : it->items()) {
      char* end = nullptr;
      const long id = std::strtol(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < INT32_MIN || id > INT32_MAX) {
        return absl::InvalidArgumentError(absl::StrCat(
            "logit_bias key '", key, "' is not a token id"));
      }
      if (!value.is_number()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "logit_bias[", key, "] must be a number, got ",
            JsonTypeName(value)));
      }
      (*p->mutable_logit_bias())[static_cast<int32_t>(id)] =
          value.get<float>();
    }
  }
  std::optional<std::string> user;
  PDSERVE_RETURN_IF_ERROR(GetString(body, "user", &user));  // accepted, unused
  std::optional<bool> ignore_eos, stream;
  PDSERVE_RETURN_IF_ERROR(GetBool(body, "ignore_eos", &ignore_eos));
  req->set_ignore_eos(ignore_eos.value_or(false));
  PDSERVE_RETURN_IF_ERROR(GetBool(body, "stream", &stream));
  api->stream = stream.value_or(false);
  if (auto it = body.find("stream_options");
      it != body.end() && !it->is_null()) {
    if (!it->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stream_options must be an object, got ", JsonTypeName(*it)));
    }
    std::optional<bool> include_usage;
    PDSERVE_RETURN_IF_ERROR(GetBool(*it, "include_usage", &include_usage));
    api->include_usage = include_usage.value_or(false);
  }
  if (auto it = body.find("chat_template_kwargs");
      it != body.end() && !it->is_null()) {
    if (!it->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chat_template_kwargs must be an object, got ", JsonTypeName(*it)));
    }
    if (!google::protobuf::util::JsonStringToMessage(
             it->dump(), req->mutable_chat_template_kwargs())
             .ok()) {
      return absl::InvalidArgumentError(
          "chat_template_kwargs could not be read");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseChatMessages(const Json& messages, const char* key,
                               v1::GenerateRequest* req) {
  if (!messages.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, " must be a list of messages, got ", JsonTypeName(messages)));
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string mk = absl::StrCat(key, "[", i, "]");
    if (!m.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(mk, " must be an object, got ", JsonTypeName(m)));
    }
    std::optional<std::string> role, name;
    PDSERVE_RETURN_IF_ERROR(GetString(m, "role", &role));
    PDSERVE_RETURN_IF_ERROR(GetString(m, "name", &name));
    v1::ChatMessage* out = req->add_messages();
    out->set_role(role.value_or(""));
    if (out->role() == "developer") out->set_role("system");
    if (name.has_value()) out->set_name(*name);
    auto it = m.find("content");
    if (it != m.end()) {
      PDSERVE_RETURN_IF_ERROR(ContentParts(*it, mk + ".content", out));
    }
    PDSERVE_RETURN_IF_ERROR(ParseMessageTools(m, mk, out));
  }
  return absl::OkStatus();
}

absl::StatusOr<ApiRequest> ParseChatRequest(const Json& body) {
  ApiRequest api;
  v1::GenerateRequest req;
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) {
    return absl::InvalidArgumentError("messages is required");
  }
  PDSERVE_RETURN_IF_ERROR(ParseChatMessages(*it, "messages", &req));
  PDSERVE_RETURN_IF_ERROR(ParseCommon(body, &req, &api));
  PDSERVE_RETURN_IF_ERROR(ParseChatGuidance(body, &req));
  std::optional<bool> logprobs;
  std::optional<int64_t> top_logprobs;
  PDSERVE_RETURN_IF_ERROR(GetBool(body, "logprobs", &logprobs));
  PDSERVE_RETURN_IF_ERROR(GetInteger(body, "top_logprobs", &top_logprobs));
  if (top_logprobs.value_or(0) != 0 && !logprobs.value_or(false)) {
    return absl::InvalidArgumentError(
        "top_logprobs needs logprobs set to true");
  }
  if (logprobs.value_or(false)) {
    req.set_return_logprobs(true);
    req.set_return_token_ids(true);
    req.set_top_logprobs(static_cast<int32_t>(
        std::clamp<int64_t>(top_logprobs.value_or(0), -1, INT32_MAX)));
  }
  api.prompts.push_back(std::move(req));
  return api;
}

absl::StatusOr<ApiRequest> ParseCompletionRequest(const Json& body) {
  ApiRequest api;
  v1::GenerateRequest base;
  PDSERVE_RETURN_IF_ERROR(ParseCommon(body, &base, &api));
  base.set_keep_space_prefix(true);  // as vLLM returns completions
  std::optional<int64_t> logprobs;
  PDSERVE_RETURN_IF_ERROR(GetInteger(body, "logprobs", &logprobs));
  if (logprobs.has_value()) {
    base.set_return_logprobs(true);
    base.set_return_token_ids(true);
    base.set_top_logprobs(
        static_cast<int32_t>(std::clamp<int64_t>(*logprobs, -1, INT32_MAX)));
  }
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) {
    return absl::InvalidArgumentError("prompt is required");
  }
  const Json& prompt = *it;
  auto add_ids = [&](const Json& ids, const std::string& key) -> absl::Status {
    v1::GenerateRequest req = base;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!ids[i].is_number_integer()) {
        return absl::InvalidArgumentError(absl::StrCat(
            key, "[", i, "] must be a token id, got ", JsonTypeName(ids[i])));
      }
      req.add_prompt_ids(static_cast<int32_t>(
          std::clamp<int64_t>(ids[i].get<int64_t>(), -1, INT32_MAX)));
    }
    api.prompts.push_back(std::move(req));
    return absl::OkStatus();
  };
  if (prompt.is_string()) {
    api.prompts.push_back(base);
    api.prompts.back().set_prompt(prompt.get<std::string>());
  } else if (prompt.is_array() && !prompt.empty()) {
    if (prompt[0].is_number()) {
      PDSERVE_RETURN_IF_ERROR(add_ids(prompt, "prompt"));
    } else {
      for (size_t i = 0; i < prompt.size(); ++i) {
        const std::string key = absl::StrCat("prompt[", i, "]");
        if (prompt[i].is_string()) {
          api.prompts.push_back(base);
          api.prompts.back().set_prompt(prompt[i].get<std::string>());
        } else if (prompt[i].is_array()) {
          PDSERVE_RETURN_IF_ERROR(add_ids(prompt[i], key));
        } else {
          return absl::InvalidArgumentError(
              absl::StrCat(key, " must be a string or token ids, got ",
                           JsonTypeName(prompt[i])));
        }
      }
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt must be a string, a list of strings or token ids, got ",
        prompt.is_array() ? "an empty list" : JsonTypeName(prompt)));
  }
  if (static_cast<int>(api.prompts.size()) * api.n > kMaxParallelSamples) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt holds ", api.prompts.size(), " prompts of n = ", api.n,
        " samples; at most ", kMaxParallelSamples, " in all"));
  }
  return api;
}

Json UsageJson(const v1::Usage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens()},
              {"completion_tokens", u.completion_tokens()},
              {"total_tokens", u.prompt_tokens() + u.completion_tokens()},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens()}}}};
}

Json ModelList(const v1::ModelInfo& model, int64_t created) {
  return Json{{"object", "list"},
              {"data",
               Json::array({Json{{"id", model.name()},
                                 {"object", "model"},
                                 {"created", created},
                                 {"owned_by", "pdserve"},
                                 {"root", model.name()},
                                 {"max_model_len", model.max_seq_len()}}})}};
}

namespace {

// What both OpenAI formats share: ids, usage chunks, [DONE], errors.
class OpenAiFormat : public ApiFormat {
 public:
  OpenAiFormat(const Tokenizer& tok, bool include_usage, const char* object)
      : tok_(tok), include_usage_(include_usage), object_(object) {}

  std::string StreamEnd(const ResponseMeta& meta, const v1::Final&,
                        const v1::Usage& usage) const override {
    std::string out;
    if (include_usage_) {
      Json j = Chunk(meta, Json::array());
      j["usage"] = UsageJson(usage);
      out = Sse(j);
    }
    return out + "data: [DONE]\n\n";
  }
  std::string StreamError(const ApiError& error) const override {
    return Sse(OpenAiErrorBody(error)) + "data: [DONE]\n\n";
  }
  std::string StreamDelta(const ResponseMeta& meta, int index,
                          const v1::Delta& delta) const override {
    Json choice = TextJson(delta, /*whole=*/false);
    choice["index"] = index;
    choice["logprobs"] = Logprobs(delta);
    choice["finish_reason"] = nullptr;
    return Sse(Chunk(meta, Json::array({std::move(choice)})));
  }
  std::string StreamFinal(const ResponseMeta& meta, int index,
                          const v1::Final& final) const override {
    Json choice = TextJson(v1::Delta(), /*whole=*/false);
    if (choice.contains("delta")) choice["delta"] = Json::object();
    choice["index"] = index;
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = FinishReasonJson(final.finish_reason());
    choice["stop_reason"] = StopReasonJson(final);
    return Sse(Chunk(meta, Json::array({std::move(choice)})));
  }
  Json Complete(const ResponseMeta& meta,
                const std::vector<ChoiceResult>& choices,
                const v1::Usage& usage) const override {
    Json list = Json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
      Json choice = TextJson(choices[i].merged, /*whole=*/true);
      choice["index"] = i;
      choice["logprobs"] = Logprobs(choices[i].merged);
      choice["finish_reason"] = FinishReasonJson(choices[i].final.finish_reason());
      choice["stop_reason"] = StopReasonJson(choices[i].final);
      list.push_back(std::move(choice));
    }
    return Body(meta, std::move(list), usage);
  }
  Json ErrorBody(const ApiError& error) const override {
    return OpenAiErrorBody(error);
  }

 protected:
  // A choice's text: {"delta": {"content"}} / {"message": {...}} for chat,
  // {"text"} for completions; `whole`: the complete (non-streamed) reply.
  virtual Json TextJson(const v1::Delta& delta, bool whole) const = 0;
  // The choice's logprobs object, or null when none were asked for.
  virtual Json Logprobs(const v1::Delta& d) const = 0;

  Json Chunk(const ResponseMeta& meta, Json choices) const {
    Json j = {{"id", meta.id},
              {"object", std::string(object_) + (chunked_suffix_ ? ".chunk" : "")},
              {"created", meta.created},
              {"model", meta.model},
              {"choices", std::move(choices)}};
    if (include_usage_) j["usage"] = nullptr;
    return j;
  }
  Json Body(const ResponseMeta& meta, Json choices,
            const v1::Usage& usage) const {
    return Json{{"id", meta.id},
                {"object", object_},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", std::move(choices)},
                {"usage", UsageJson(usage)}};
  }
  std::string TokenText(int32_t id) const {
    return unicode::ReplaceInvalidUtf8(tok_.TokenBytes(id));
  }
  Json TokenBytesJson(int32_t id) const {
    Json bytes = Json::array();
    for (unsigned char c : tok_.TokenBytes(id)) bytes.push_back(c);
    return bytes;
  }

  const Tokenizer& tok_;
  bool include_usage_;
  const char* object_;
  bool chunked_suffix_ = false;
};

class ChatFormat : public OpenAiFormat {
 public:
  ChatFormat(const Tokenizer& tok, bool include_usage)
      : OpenAiFormat(tok, include_usage, "chat.completion") {
    chunked_suffix_ = true;
  }

  std::string StreamStart(const ResponseMeta& meta, int choices,
                          int32_t) const override {
    std::string out;
    for (int i = 0; i < choices; ++i) {
      out += Sse(Chunk(meta, Json::array({Json{
                                 {"index", i},
                                 {"delta", {{"role", "assistant"}, {"content", ""}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", nullptr}}})));
    }
    return out;
  }
 private:
  Json TextJson(const v1::Delta& delta, bool whole) const override {
    return Json{{whole ? "message" : "delta", ChatMessageJson(delta, whole)}};
  }
  // {"content": [{token, logprob, bytes, top_logprobs}]}.
  Json Logprobs(const v1::Delta& d) const override {
    if (d.logprobs_size() == 0) return nullptr;
    Json content = Json::array();
    for (int i = 0; i < d.logprobs_size() && i < d.token_ids_size(); ++i) {
      const int32_t id = d.token_ids(i);
      Json top = Json::array();
      if (i < d.top_logprobs_size()) {
        for (const v1::TokenLogprob& alt : d.top_logprobs(i).alternatives()) {
          top.push_back(Json{{"token", TokenText(alt.token_id())},
                             {"logprob", alt.logprob()},
                             {"bytes", TokenBytesJson(alt.token_id())}});
        }
      }
      content.push_back(Json{{"token", TokenText(id)},
                             {"logprob", d.logprobs(i)},
                             {"bytes", TokenBytesJson(id)},
                             {"top_logprobs", std::move(top)}});
    }
    return Json{{"content", std::move(content)}};
  }
};

class CompletionFormat : public OpenAiFormat {
 public:
  CompletionFormat(const Tokenizer& tok, bool include_usage)
      : OpenAiFormat(tok, include_usage, "text_completion") {}

  std::string StreamStart(const ResponseMeta&, int, int32_t) const override {
    return "";
  }
 private:
  Json TextJson(const v1::Delta& delta, bool) const override {
    return Json{{"text", delta.text()}};
  }
  // The legacy shape: tokens, token_logprobs, top_logprobs ({text: lp}),
  // text_offset (bytes into this piece of text).
  Json Logprobs(const v1::Delta& d) const override {
    if (d.logprobs_size() == 0) return nullptr;
    Json tokens = Json::array(), lps = Json::array(), tops = Json::array(),
         offsets = Json::array();
    size_t offset = 0;
    for (int i = 0; i < d.logprobs_size() && i < d.token_ids_size(); ++i) {
      const std::string text = TokenText(d.token_ids(i));
      tokens.push_back(text);
      lps.push_back(d.logprobs(i));
      offsets.push_back(offset);
      offset += text.size();
      Json top = Json::object();
      if (i < d.top_logprobs_size()) {
        for (const v1::TokenLogprob& alt : d.top_logprobs(i).alternatives()) {
          top[TokenText(alt.token_id())] = alt.logprob();
        }
      }
      tops.push_back(std::move(top));
    }
    return Json{{"tokens", std::move(tokens)},
                {"token_logprobs", std::move(lps)},
                {"top_logprobs", std::move(tops)},
                {"text_offset", std::move(offsets)}};
  }
};

}  // namespace

std::unique_ptr<ApiFormat> MakeChatFormat(const Tokenizer& tokenizer,
                                          bool include_usage) {
  return std::make_unique<ChatFormat>(tokenizer, include_usage);
}

std::unique_ptr<ApiFormat> MakeCompletionFormat(const Tokenizer& tokenizer,
                                                bool include_usage) {
  return std::make_unique<CompletionFormat>(tokenizer, include_usage);
}

}  // namespace pdserve::frontend
