// The HTTP API's pure translation: OpenAI / Anthropic JSON onto the public
// GenerateRequest, errors onto HTTP statuses, and Deltas / Finals onto
// response bodies and SSE events.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/frontend/anthropic_api.h"
#include "server/frontend/http_api.h"
#include "server/frontend/openai_api.h"
#include "server/frontend/request_prep.h"
#include "server/tokenizer/tokenizer.h"

namespace pdserve::frontend {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Json J(const char* text) { return Json::parse(text); }

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(OpenAiParseTest, ChatFieldsMapOntoTheGenerateRequest) {
  auto api = ParseChatRequest(J(R"({
    "model": "m", "messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "a"},
                                   {"type": "text", "text": "b"}]}],
    "max_tokens": 9, "max_completion_tokens": 7, "top_k": -1, "top_p": 0.5,
    "min_p": 0.1, "presence_penalty": 0.5, "frequency_penalty": -0.5,
    "repetition_penalty": 1.1, "seed": 42, "stop": "END", "n": 2,
    "logprobs": true, "top_logprobs": 3, "logit_bias": {"17": -100},
    "user": "u", "ignore_eos": true, "priority": 5,
    "chat_template_kwargs": {"enable_thinking": false},
    "stream": true, "stream_options": {"include_usage": true},
    "tools": [], "some_future_field": {"x": 1}})"));
  ASSERT_TRUE(api.ok()) << api.status();
  ASSERT_EQ(api->prompts.size(), 1u);
  const v1::GenerateRequest& r = api->prompts[0];
  EXPECT_EQ(r.model(), "m");
  ASSERT_EQ(r.messages_size(), 2);
  EXPECT_EQ(r.messages(0).role(), "system");
  EXPECT_EQ(r.messages(1).content(), "a\nb");
  EXPECT_EQ(r.max_tokens(), 7);  // max_completion_tokens wins
  EXPECT_EQ(r.sampling().top_k(), 0);
  EXPECT_FLOAT_EQ(r.sampling().top_p(), 0.5f);
  EXPECT_FLOAT_EQ(r.sampling().temperature(), 1.0f);  // OpenAI's default
  EXPECT_FLOAT_EQ(r.sampling().presence_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(r.sampling().frequency_penalty(), -0.5f);
  EXPECT_FLOAT_EQ(r.sampling().repetition_penalty(), 1.1f);
  EXPECT_EQ(r.sampling().seed(), 42u);
  EXPECT_FLOAT_EQ(r.sampling().logit_bias().at(17), -100.0f);
  EXPECT_THAT(r.stop(), ElementsAre("END"));
  EXPECT_TRUE(r.return_logprobs());
  EXPECT_TRUE(r.return_token_ids());
  EXPECT_EQ(r.top_logprobs(), 3);
  EXPECT_TRUE(r.ignore_eos());
  EXPECT_EQ(r.priority(), -5);  // vLLM's lower-first onto higher-first
  EXPECT_FALSE(r.chat_template_kwargs().fields().at("enable_thinking").bool_value());
  EXPECT_FALSE(r.keep_space_prefix());
  EXPECT_EQ(api->n, 2);
  EXPECT_TRUE(api->seeded);
  EXPECT_TRUE(api->stream);
  EXPECT_TRUE(api->include_usage);
}

TEST(OpenAiParseTest, WrongTypesAndHttpOnlyRulesNameTheField) {
  struct Case {
    const char* body;
    const char* message;
  } cases[] = {
      {R"({"messages": "hi"})", "messages must be a list of messages, got string"},
      {R"({"messages": [], "temperature": "hot"})",
       "temperature must be a number, got string"},
      {R"({"messages": [], "max_tokens": 1.5})", "max_tokens must be an integer, got 1.5"},
      {R"({"messages": [], "n": 0})", "n 0 must be in [1, 16]"},
      {R"({"messages": [], "stop": [1]})", "stop[0] must be a string, got integer"},
      {R"({"messages": [], "top_logprobs": 2})",
       "top_logprobs needs logprobs set to true"},
      {R"({"messages": [], "logit_bias": {"x": 1}})",
       "logit_bias key 'x' is not a token id"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].image_url.url is required"},
      {R"({"messages": [{"role": "user", "content": [{"type": "audio"}]}]})",
       "messages[0].content[0].type 'audio' is not supported (text, "
       "image_url)"},
      {R"({"model": "m"})", "messages is required"},
  };
  for (const Case& c : cases) {
    auto api = ParseChatRequest(J(c.body));
    ASSERT_FALSE(api.ok()) << c.body;
    EXPECT_EQ(api.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(api.status()), HasSubstr(c.message)) << c.body;
  }
}

TEST(OpenAiParseTest, CompletionPromptsAsTextOrTokenIds) {
  auto one = ParseCompletionRequest(J(R"({"prompt": "Hello", "logprobs": 2})"));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->prompts[0].prompt(), "Hello");
  EXPECT_TRUE(one->prompts[0].keep_space_prefix());
  EXPECT_EQ(one->prompts[0].top_logprobs(), 2);
  auto ids = ParseCompletionRequest(J(R"({"prompt": [1, 2, 3]})"));
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(ids->prompts[0].prompt_ids(), ElementsAre(1, 2, 3));
  auto many = ParseCompletionRequest(J(R"({"prompt": ["a", [4, 5]], "n": 2})"));
  ASSERT_TRUE(many.ok());
  ASSERT_EQ(many->prompts.size(), 2u);
  EXPECT_EQ(many->prompts[0].prompt(), "a");
  EXPECT_THAT(many->prompts[1].prompt_ids(), ElementsAre(4, 5));
  EXPECT_THAT(Message(ParseCompletionRequest(J(R"({"prompt": []})")).status()),
              HasSubstr("prompt must be a string, a list of strings or token "
                        "ids, got an empty list"));
  EXPECT_THAT(
      Message(ParseCompletionRequest(
                  J(R"({"prompt": ["a","b","c","d","e"], "n": 4})"))
                  .status()),
      HasSubstr("prompt holds 5 prompts of n = 4 samples; at most 16 in all"));
}

TEST(AnthropicParseTest, SystemMessagesAndRequiredMaxTokens) {
  auto api = ParseMessagesRequest(
      J(R"({"model": "m", "max_tokens": 5, "system": [{"type": "text", "text": "S"}],
            "messages": [{"role": "user", "content": "Q"}],
            "stop_sequences": ["X"], "top_k": 3, "metadata": {"user_id": "u"}})"),
      /*for_count=*/false);
  ASSERT_TRUE(api.ok()) << api.status();
  const v1::GenerateRequest& r = api->prompts[0];
  ASSERT_EQ(r.messages_size(), 2);
  EXPECT_EQ(r.messages(0).role(), "system");
  EXPECT_EQ(r.messages(0).content(), "S");
  EXPECT_EQ(r.max_tokens(), 5);
  EXPECT_EQ(r.sampling().top_k(), 3);
  EXPECT_THAT(r.stop(), ElementsAre("X"));
  const Json no_max = J(R"({"messages": [{"role": "user", "content": "Q"}]})");
  EXPECT_THAT(Message(ParseMessagesRequest(no_max, false).status()),
              HasSubstr("max_tokens is required"));
  EXPECT_TRUE(ParseMessagesRequest(no_max, /*for_count=*/true).ok());
  EXPECT_THAT(Message(ParseMessagesRequest(
                          J(R"({"max_tokens": 1, "messages": [{"role": "system",
                                "content": "x"}]})"),
                          false)
                          .status()),
              HasSubstr("messages[0].role 'system' must be user or assistant"));
}

TEST(ApiErrorTest, SharedPathStatusesMapOntoHttp) {
  ApiError e = ToApiError(
      absl::InvalidArgumentError("sampling.top_p 1.5 must be in [0, 1]"), true);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "top_p");
  EXPECT_EQ(e.message, "top_p 1.5 must be in [0, 1]");
  e = ToApiError(absl::InvalidArgumentError("model 'x' is not served here"), true);
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  e = ToApiError(absl::ResourceExhaustedError(
                     "prompt of 9 tokens exceeds the sequence capacity of 8 tokens"),
                 true);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "prompt");
  e = ToApiError(absl::ResourceExhaustedError("queue full: 2 requests waiting"),
                 false);
  EXPECT_EQ(e.status, 429);
  EXPECT_EQ(e.param, "");
  EXPECT_EQ(ToApiError(absl::UnavailableError("engine lost"), false).status, 503);
  EXPECT_EQ(ToApiError(absl::InvalidArgumentError("all 2 messages have empty "
                                                  "content"),
                       true)
                .param,
            "");
  const Json body = OpenAiErrorBody(e);
  EXPECT_EQ(body["error"]["type"], "rate_limit_error");
  EXPECT_TRUE(body["error"]["param"].is_null());
  EXPECT_EQ(AnthropicErrorBody(e)["error"]["type"], "rate_limit_error");
  EXPECT_EQ(AnthropicErrorBody(e)["type"], "error");
}

// A tokenizer for the token texts of logprobs (GPT-2's vocabulary).
const Tokenizer& Gpt2() {
  static const Tokenizer* tok = [] {
    auto t = Tokenizer::Load(std::string(PDSERVE_SHARED_DIR) +
                             "/tokenizers/vocab-tests/ggml-vocab-gpt-2.gguf");
    return t.ok() ? t->release() : nullptr;
  }();
  return *tok;
}

// The JSON of each "data: " event of an SSE text.
std::vector<std::string> DataLines(const std::string& sse) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    const size_t end = sse.find("\n\n", pos);
    out.push_back(sse.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

TEST(OpenAiFormatTest, ChatDeltasBecomeChunksThenUsageThenDone) {
  if (!Tokenizer::Load(std::string(PDSERVE_SHARED_DIR) +
                       "/tokenizers/vocab-tests/ggml-vocab-gpt-2.gguf")
           .ok()) {
    GTEST_SKIP() << "no ../shared vocabulary";
  }
  auto f = MakeChatFormat(Gpt2(), /*include_usage=*/true);
  const ResponseMeta meta{"chatcmpl-1", 1700000000, "m"};
  std::vector<std::string> start = DataLines(f->StreamStart(meta, 2, 10));
  ASSERT_EQ(start.size(), 2u);
  EXPECT_EQ(J(start[1].c_str())["choices"][0]["index"], 1);
  EXPECT_EQ(J(start[0].c_str())["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(J(start[0].c_str())["object"], "chat.completion.chunk");

  v1::Delta d;
  d.set_text("Hi");
  d.add_token_ids(17250);  // "Hi"
  d.add_logprobs(-0.25f);
  v1::TokenLogprob* alt = d.add_top_logprobs()->add_alternatives();
  alt->set_token_id(17250);
  alt->set_logprob(-0.25f);
  const Json chunk = J(DataLines(f->StreamDelta(meta, 1, d))[0].c_str());
  EXPECT_EQ(chunk["choices"][0]["delta"]["content"], "Hi");
  EXPECT_TRUE(chunk["usage"].is_null());
  const Json& lp = chunk["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(lp["token"], "Hi");
  EXPECT_EQ(lp["bytes"], Json::array({72, 105}));
  EXPECT_FLOAT_EQ(lp["top_logprobs"][0]["logprob"].get<float>(), -0.25f);

  v1::Final fin;
  fin.set_finish_reason(v1::FINISH_REASON_STOP);
  fin.set_stop_string("END");
  const Json last = J(DataLines(f->StreamFinal(meta, 1, fin))[0].c_str());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(last["choices"][0]["stop_reason"], "END");

  v1::Usage u;
  u.set_prompt_tokens(10);
  u.set_completion_tokens(4);
  u.set_cached_tokens(8);
  std::vector<std::string> end = DataLines(f->StreamEnd(meta, fin, u));
  ASSERT_EQ(end.size(), 2u);
  const Json usage = J(end[0].c_str());
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 14);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  EXPECT_EQ(end[1], "[DONE]");

  ChoiceResult c;
  MergeDelta(d, &c.merged);
  MergeDelta(d, &c.merged);
  c.final = fin;
  const Json body = f->Complete(meta, {c}, u);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "HiHi");
  EXPECT_EQ(body["choices"][0]["logprobs"]["content"].size(), 2u);
  EXPECT_EQ(body["usage"]["completion_tokens"], 4);
}

TEST(OpenAiFormatTest, CompletionChunksWithoutUsageEndWithDone) {
  if (!Tokenizer::Load(std::string(PDSERVE_SHARED_DIR) +
                       "/tokenizers/vocab-tests/ggml-vocab-gpt-2.gguf")
           .ok()) {
    GTEST_SKIP() << "no ../shared vocabulary";
  }
  auto f = MakeCompletionFormat(Gpt2(), /*include_usage=*/false);
  const ResponseMeta meta{"cmpl-1", 1, "m"};
  EXPECT_EQ(f->StreamStart(meta, 1, 3), "");
  v1::Delta d;
  d.set_text(" Paris");
  const Json chunk = J(DataLines(f->StreamDelta(meta, 0, d))[0].c_str());
  EXPECT_EQ(chunk["object"], "text_completion");
  EXPECT_EQ(chunk["choices"][0]["text"], " Paris");
  EXPECT_FALSE(chunk.contains("usage"));
  EXPECT_EQ(f->StreamEnd(meta, v1::Final(), v1::Usage()), "data: [DONE]\n\n");
  ApiError e;
  e.status = 503;
  e.message = "engine lost";
  std::vector<std::string> err = DataLines(f->StreamError(e));
  EXPECT_EQ(J(err[0].c_str())["error"]["type"], "overloaded_error");
  EXPECT_EQ(err[1], "[DONE]");
}

TEST(AnthropicFormatTest, EventsFromMessageStartToMessageStop) {
  auto f = MakeMessagesFormat();
  const ResponseMeta meta{"msg_1", 1, "m"};
  v1::Delta d;
  d.set_text("Hello");
  v1::Final fin;
  fin.set_finish_reason(v1::FINISH_REASON_LENGTH);
  v1::Usage u;
  u.set_prompt_tokens(7);
  u.set_completion_tokens(3);
  u.set_cached_tokens(4);
  // One call after the other: the format keeps which block is open.
  std::string sse = f->StreamStart(meta, 1, 7);
  sse += f->StreamDelta(meta, 0, d);
  sse += f->StreamFinal(meta, 0, fin);
  sse += f->StreamEnd(meta, fin, u);
  std::vector<std::string> events;
  size_t pos = 0;
  while ((pos = sse.find("event: ", pos)) != std::string::npos) {
    pos += 7;
    events.push_back(sse.substr(pos, sse.find('\n', pos) - pos));
  }
  EXPECT_THAT(events, ElementsAre("message_start", "ping", "content_block_start",
                                  "content_block_delta", "content_block_stop",
                                  "message_delta", "message_stop"));
  std::vector<std::string> data = DataLines(sse);
  EXPECT_EQ(J(data[0].c_str())["message"]["usage"]["input_tokens"], 7);
  EXPECT_EQ(J(data[3].c_str())["delta"]["text"], "Hello");
  EXPECT_EQ(J(data[5].c_str())["delta"]["stop_reason"], "max_tokens");
  EXPECT_EQ(J(data[5].c_str())["usage"]["output_tokens"], 3);
  ChoiceResult c;
  c.merged = d;
  c.final.set_finish_reason(v1::FINISH_REASON_STOP);
  c.final.set_stop_string("###");
  const Json body = f->Complete(meta, {c}, u);
  EXPECT_EQ(body["content"][0]["text"], "Hello");
  EXPECT_EQ(body["stop_reason"], "stop_sequence");
  EXPECT_EQ(body["stop_sequence"], "###");
  EXPECT_EQ(body["usage"]["cache_read_input_tokens"], 4);
}

TEST(ApiKeyTest, MatchesOnlyAnAcceptedKey) {
  const std::vector<std::string> keys = {"alpha-key", "beta"};
  EXPECT_TRUE(ApiKeyMatches("alpha-key", keys));
  EXPECT_TRUE(ApiKeyMatches("beta", keys));
  EXPECT_FALSE(ApiKeyMatches("alpha-ke", keys));
  EXPECT_FALSE(ApiKeyMatches("alpha-keyX", keys));
  EXPECT_FALSE(ApiKeyMatches("", keys));
  EXPECT_FALSE(ApiKeyMatches("beta", {}));
  auto loaded = LoadApiKeys("a, b", "");
  ASSERT_TRUE(loaded.ok());
  EXPECT_THAT(*loaded, ElementsAre("a", "b"));
  EXPECT_THAT(Message(LoadApiKeys("", "/nonexistent/keys").status()),
              HasSubstr("--api-key-file /nonexistent/keys cannot be read"));
}

TEST(ServedModelNameTest, TheFilesStem) {
  EXPECT_EQ(DefaultServedModelName("/m/SmolLM2-135M-Instruct.Q4_1.gguf"),
            "SmolLM2-135M-Instruct.Q4_1");
  EXPECT_EQ(DefaultServedModelName("/models/Qwen3-0.6B/"), "Qwen3-0.6B");
  EXPECT_EQ(DefaultServedModelName("stories260K.bin"), "stories260K");
}

}  // namespace
}  // namespace pdserve::frontend
