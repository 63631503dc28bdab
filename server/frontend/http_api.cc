#include "server/frontend/http_api.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "server/frontend/anthropic_api.h"
#include "server/frontend/http_generation.h"
#include "server/frontend/openai_api.h"

#ifndef PDSERVE_VERSION
#define PDSERVE_VERSION "unknown"
#endif

namespace pdserve::frontend {
namespace {

bool IsAnthropicRoute(const std::string& route) {
  return absl::StartsWith(route, "/v1/messages");
}

// Answers with an error in the route's API shape, counted in the metrics.
void RespondError(const std::string& route, const ApiError& e,
                  const std::shared_ptr<http::ResponseWriter>& out) {
  const Json body =
      IsAnthropicRoute(route) ? AnthropicErrorBody(e) : OpenAiErrorBody(e);
  http::Headers headers;
  if (e.status == 401) headers.push_back({"WWW-Authenticate", "Bearer"});
  out->Respond(e.status, kJsonContentType, DumpJson(body), std::move(headers));
}

void RespondJson(const Json& body,
                 const std::shared_ptr<http::ResponseWriter>& out) {
  out->Respond(200, kJsonContentType, DumpJson(body));
}

ApiError Invalid(const absl::Status& s) {
  return ToApiError(s, /*during_validation=*/true);
}

// The served routes and their methods; anything else is "other" in metrics.
struct Route {
  const char* path;
  const char* method;
};
constexpr Route kRoutes[] = {
    {"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"},
    {"/v1/messages", "POST"},         {"/v1/messages/count_tokens", "POST"},
    {"/tokenize", "POST"},            {"/detokenize", "POST"},
    {"/v1/models", "GET"},            {"/health", "GET"},
    {"/version", "GET"},
};

// Counts the answer's status in the metrics when it starts.
class CountingWriter : public http::ResponseWriter {
 public:
  CountingWriter(std::shared_ptr<http::ResponseWriter> inner,
                 metrics::FrontendMetrics* metrics, std::string route)
      : inner_(std::move(inner)), metrics_(metrics), route_(std::move(route)) {}
  void Respond(int status, absl::string_view type, std::string body,
               http::Headers headers) override {
    Count(status);
    inner_->Respond(status, type, std::move(body), std::move(headers));
  }
  void StartStream(int status, absl::string_view type,
                   http::Headers headers) override {
    Count(status);
    inner_->StartStream(status, type, std::move(headers));
  }
  void Write(std::string data) override { inner_->Write(std::move(data)); }
  void End() override { inner_->End(); }
  void OnClientGone(std::function<void()> fn) override {
    inner_->OnClientGone(std::move(fn));
  }
  bool closed() const override { return inner_->closed(); }

 private:
  void Count(int status) {
    if (metrics_ != nullptr && !counted_.exchange(true)) {
      metrics_->RecordHttpRequest(route_, status);
    }
  }
  std::shared_ptr<http::ResponseWriter> inner_;
  metrics::FrontendMetrics* metrics_;
  std::string route_;
  std::atomic<bool> counted_{false};
};

}  // namespace

bool ApiKeyMatches(const std::string& offered,
                   const std::vector<std::string>& keys) {
  bool match = false;
  for (const std::string& key : keys) {
    // Touch every byte of the key whatever the offer: no early exit.
    unsigned char diff = offered.size() == key.size() ? 0 : 1;
    for (size_t i = 0; i < key.size(); ++i) {
      const unsigned char o =
          i < offered.size() ? static_cast<unsigned char>(offered[i]) : 0;
      diff |= o ^ static_cast<unsigned char>(key[i]);
    }
    match |= diff == 0;
  }
  return match;
}

absl::StatusOr<std::vector<std::string>> LoadApiKeys(
    const std::string& keys_flag, const std::string& key_file) {
  std::vector<std::string> keys;
  for (absl::string_view k : absl::StrSplit(keys_flag, ',', absl::SkipEmpty())) {
    keys.emplace_back(absl::StripAsciiWhitespace(k));
  }
  if (!key_file.empty()) {
    std::ifstream in(key_file);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("--api-key-file ", key_file, " cannot be read"));
    }
    const size_t before = keys.size();
    std::string line;
    while (std::getline(in, line)) {
      const absl::string_view k = absl::StripAsciiWhitespace(line);
      if (!k.empty() && k[0] != '#') keys.emplace_back(k);
    }
    if (keys.size() == before) {
      return absl::InvalidArgumentError(
          absl::StrCat("--api-key-file ", key_file, " holds no key"));
    }
  }
  return keys;
}

HttpApi::HttpApi(const GenerationContext& context, HttpApiOptions options)
    : context_(context), options_(std::move(options)) {}

bool HttpApi::Authorized(const http::Request& request) const {
  if (options_.api_keys.empty()) return true;
  std::string offered = request.Header("x-api-key");
  const std::string& auth = request.Header("authorization");
  if (auth.size() > 7 && absl::EqualsIgnoreCase(auth.substr(0, 7), "Bearer ")) {
    offered = auth.substr(7);
  }
  return ApiKeyMatches(offered, options_.api_keys);
}

void HttpApi::Handle(http::Request request,
                     std::shared_ptr<http::ResponseWriter> raw_out) {
  const Route* route = nullptr;
  bool path_known = false;
  for (const Route& r : kRoutes) {
    if (request.path != r.path) continue;
    path_known = true;
    if (request.method == r.method) route = &r;
  }
  const std::string name = route != nullptr ? route->path : "other";
  std::shared_ptr<http::ResponseWriter> out =
      std::make_shared<CountingWriter>(std::move(raw_out), context_.metrics, name);
  if (route == nullptr) {
    ApiError e;
    e.status = path_known ? 405 : 404;
    e.message = path_known
                    ? absl::StrCat(request.method, " is not allowed on ",
                                   request.path)
                    : absl::StrCat("no route ", request.method, " ",
                                   request.path);
    RespondError(request.path, e, out);
    return;
  }
  const std::string path = route->path;
  if (path == "/health") {
    const bool ok = ready_ && !draining_;
    out->Respond(ok ? 200 : 503, "text/plain", ok ? "" : "not ready\n");
    return;
  }
  if (path == "/version") {
    RespondJson(Json{{"version", PDSERVE_VERSION}}, out);
    return;
  }
  if (!Authorized(request)) {
    ApiError e;
    e.status = 401;
    e.message = "a valid API key is required (Authorization: Bearer KEY)";
    e.code = "invalid_api_key";
    RespondError(path, e, out);
    return;
  }
  if (path == "/v1/models") {
    RespondJson(ModelList(DescribeModel(*context_.model), absl::ToUnixSeconds(absl::Now())),
                out);
  } else if (path == "/tokenize") {
    Tokenize(request, out);
  } else if (path == "/detokenize") {
    Detokenize(request, out);
  } else if (path == "/v1/messages/count_tokens") {
    CountTokens(request, out);
  } else {
    Generate(path, request, out);
  }
}

void HttpApi::Generate(const std::string& route, const http::Request& request,
                       const std::shared_ptr<http::ResponseWriter>& out) {
  const auto start = GenerationStream::Clock::now();
  if (!ready_ || draining_) {
    ApiError e;
    e.status = 503;
    e.message = draining_ ? "the server is shutting down"
                          : "the engine is not ready; retry shortly";
    RespondError(route, e, out);
    return;
  }
  auto body = ParseBody(request.body);
  if (!body.ok()) return RespondError(route, Invalid(body.status()), out);
  absl::StatusOr<ApiRequest> api;
  std::unique_ptr<ApiFormat> format;
  ResponseMeta meta;
  if (route == "/v1/chat/completions") {
    api = ParseChatRequest(*body);
    if (api.ok()) format = MakeChatFormat(*context_.model->tokenizer, api->include_usage);
    meta.id = NextRequestId("chatcmpl-");
  } else if (route == "/v1/completions") {
    api = ParseCompletionRequest(*body);
    if (api.ok()) {
      format = MakeCompletionFormat(*context_.model->tokenizer, api->include_usage);
    }
    meta.id = NextRequestId("cmpl-");
  } else {
    api = ParseMessagesRequest(*body, /*for_count=*/false);
    format = MakeMessagesFormat();
    meta.id = NextRequestId("msg_");
  }
  if (!api.ok()) return RespondError(route, Invalid(api.status()), out);
  std::vector<PreparedRequest> prepared;
  const auto encode_start = GenerationStream::Clock::now();
  for (const v1::GenerateRequest& req : api->prompts) {
    auto p = PrepareRequest(req, *context_.model);
    if (!p.ok()) return RespondError(route, Invalid(p.status()), out);
    prepared.push_back(std::move(*p));
  }
  if (context_.metrics != nullptr) {
    context_.metrics->ObserveTokenizer(
        metrics::TokenizerOp::kEncode,
        std::chrono::duration<double>(GenerationStream::Clock::now() -
                                      encode_start)
            .count());
  }
  meta.created = absl::ToUnixSeconds(absl::Now());
  meta.model = context_.model->name;
  HttpGeneration::Run(context_, std::move(format), std::move(meta),
                      std::move(*api), std::move(prepared), out, active_,
                      start);
}

void HttpApi::CountTokens(const http::Request& request,
                          const std::shared_ptr<http::ResponseWriter>& out) {
  const std::string route = "/v1/messages/count_tokens";
  auto body = ParseBody(request.body);
  if (!body.ok()) return RespondError(route, Invalid(body.status()), out);
  auto api = ParseMessagesRequest(*body, /*for_count=*/true);
  if (!api.ok()) return RespondError(route, Invalid(api.status()), out);
  auto p = PrepareRequest(api->prompts[0], *context_.model);
  if (!p.ok()) return RespondError(route, Invalid(p.status()), out);
  RespondJson(Json{{"input_tokens", p->prompt_ids.size()}}, out);
}

void HttpApi::Tokenize(const http::Request& request,
                       const std::shared_ptr<http::ResponseWriter>& out) {
  const std::string route = "/tokenize";
  auto body = ParseBody(request.body);
  if (!body.ok()) return RespondError(route, Invalid(body.status()), out);
  std::vector<int32_t> ids;
  if (auto it = body->find("messages"); it != body->end() && !it->is_null()) {
    v1::GenerateRequest req;
    if (absl::Status s = ParseChatMessages(*it, "messages", &req); !s.ok()) {
      return RespondError(route, Invalid(s), out);
    }
    auto p = PrepareRequest(req, *context_.model);
    if (!p.ok()) return RespondError(route, Invalid(p.status()), out);
    ids = std::move(p->prompt_ids);
  } else {
    std::optional<std::string> prompt;
    std::optional<bool> add_special;
    absl::Status s = GetString(*body, "prompt", &prompt);
    if (s.ok()) s = GetBool(*body, "add_special_tokens", &add_special);
    if (s.ok() && !prompt.has_value()) {
      s = absl::InvalidArgumentError("prompt or messages is required");
    }
    if (!s.ok()) return RespondError(route, Invalid(s), out);
    auto encoded = TokenizeText(*context_.model, *prompt,
                                add_special.value_or(true) &&
                                    context_.model->tokenizer->add_bos(),
                                /*parse_special=*/false);
    if (!encoded.ok()) return RespondError(route, Invalid(encoded.status()), out);
    ids = std::move(*encoded);
  }
  RespondJson(Json{{"count", ids.size()},
                   {"max_model_len", context_.model->max_seq_len.load()},
                   {"tokens", ids}},
              out);
}

void HttpApi::Detokenize(const http::Request& request,
                         const std::shared_ptr<http::ResponseWriter>& out) {
  const std::string route = "/detokenize";
  auto body = ParseBody(request.body);
  if (!body.ok()) return RespondError(route, Invalid(body.status()), out);
  auto it = body->find("tokens");
  if (it == body->end() || !it->is_array()) {
    return RespondError(
        route,
        Invalid(absl::InvalidArgumentError("tokens must be a list of token ids")),
        out);
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < it->size(); ++i) {
    if (!(*it)[i].is_number_integer()) {
      return RespondError(route,
                          Invalid(absl::InvalidArgumentError(absl::StrCat(
                              "tokens[", i, "] must be a token id, got ",
                              JsonTypeName((*it)[i])))),
                          out);
    }
    ids.push_back(static_cast<int32_t>(
        std::clamp<int64_t>((*it)[i].get<int64_t>(), -1, INT32_MAX)));
  }
  auto text = DetokenizeIds(*context_.model, ids);
  if (!text.ok()) {
    // The shared message names token_ids[i]; this API calls them tokens.
    ApiError e = Invalid(text.status());
    e.param = "tokens";
    return RespondError(route, e, out);
  }
  RespondJson(Json{{"prompt", *text}}, out);
}

}  // namespace pdserve::frontend
