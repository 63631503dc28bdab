// Tool calling, reasoning and structured output on the HTTP APIs'
// translation and the shared request path (issue 15): OpenAI requests with
// tools / tool_calls / role "tool" rendered with the Qwen3 template exactly
// as transformers' apply_chat_template renders them (goldens from
// tests/tools/tool_request_goldens.py); every bad input refused with its
// field named; forced tool choices and response formats compiled into the
// request's constraint; the reply JSON with reasoning_content / tool_calls
// and Anthropic's thinking / tool_use blocks.
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "server/frontend/anthropic_api.h"
#include "server/frontend/openai_api.h"
#include "server/frontend/openai_tools.h"
#include "server/frontend/request_prep.h"

namespace pdserve::frontend {
namespace {

std::string Shared(const std::string& rel) {
  return std::string(PDSERVE_SHARED_DIR) + "/" + rel;
}

const ModelContext* Qwen3() {
  static const ModelContext* m = [] {
    auto ctx = LoadModelContext(Shared("tokenizers/qwen3"), "qwen3");
    if (!ctx.ok()) return static_cast<ModelContext*>(nullptr);
    (*ctx)->max_seq_len = 4096;
    return ctx->release();
  }();
  return m;
}

#define NEED_QWEN3()                                        \
  if (Qwen3() == nullptr) GTEST_SKIP() << "no ../shared Qwen3 tokenizer"

Json J(const char* text) { return Json::parse(text); }

v1::GenerateRequest Chat(const Json& body) {
  auto api = ParseChatRequest(body);
  EXPECT_TRUE(api.ok()) << api.status();
  return api.ok() ? api->prompts.at(0) : v1::GenerateRequest();
}

TEST(ToolGoldenTest, RequestsRenderAsTransformersDoes) {
  NEED_QWEN3();
  std::ifstream in(std::string(PDSERVE_TESTDATA_DIR) +
                   "/chat/qwen3_tool_request_goldens.json");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const Json goldens = Json::parse(ss.str());
  ASSERT_GE(goldens["cases"].size(), 5u);
  for (const Json& c : goldens["cases"]) {
    const v1::GenerateRequest req = Chat(c["request"]);
    auto text = RenderChatPrompt(req, *Qwen3());
    ASSERT_TRUE(text.ok()) << c["name"] << ": " << text.status();
    EXPECT_EQ(*text, c["expected"].get<std::string>()) << c["name"];
  }
}

TEST(ToolPrepTest, Qwen3FormatsAreDetected) {
  NEED_QWEN3();
  EXPECT_EQ(Qwen3()->tool_format, ToolCallFormat::kHermes);
  EXPECT_EQ(Qwen3()->reasoning_format, ReasoningFormat::kThink);
  EXPECT_EQ(Qwen3()->think_start_ids.size(), 1u);
  EXPECT_EQ(Qwen3()->think_end_ids.size(), 1u);
}

const char kWeatherTool[] = R"({"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}})";

Json ToolRequest(const char* extra) {
  Json body = J(R"({"messages": [{"role": "user", "content": "Weather?"}]})");
  body["tools"] = Json::array({J(kWeatherTool)});
  const Json more = J(extra);
  for (const auto& [k, v] : more.items()) body[k] = v;
  return body;
}

TEST(ToolPrepTest, ForcedChoiceBecomesTheConstraint) {
  NEED_QWEN3();
  auto p = PrepareRequest(
      Chat(ToolRequest(R"({"tool_choice": {"type": "function",
                           "function": {"name": "get_weather"}}})")),
      *Qwen3());
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->constraint.has_value());
  EXPECT_EQ(p->constraint->prefix(), "<tool_call>\n");
  EXPECT_EQ(p->constraint->suffix(), "\n</tool_call>");
  const Json schema = Json::parse(p->constraint->json_schema());
  EXPECT_EQ(schema["properties"]["name"]["const"], "get_weather");
  EXPECT_EQ(p->parser.tool_calls, ToolCallFormat::kHermes);
  // Qwen3 thinks: a constraint comes with the reasoning control, so the
  // grammar starts after </think>.
  ASSERT_TRUE(p->reasoning.has_value());
  EXPECT_FALSE(p->reasoning->starts_inside());

  auto required = PrepareRequest(Chat(ToolRequest(R"({"tool_choice": "required"})")),
                                 *Qwen3());
  ASSERT_TRUE(required.ok()) << required.status();
  EXPECT_TRUE(required->constraint.has_value());
  auto none = PrepareRequest(Chat(ToolRequest(R"({"tool_choice": "none"})")), *Qwen3());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->constraint.has_value());
  EXPECT_EQ(none->parser.tool_calls, ToolCallFormat::kNone);
  auto plain = PrepareRequest(Chat(J(R"({"messages": [{"role": "user",
                                  "content": "Hi"}]})")), *Qwen3());
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->reasoning.has_value()) << "no guide without a need";
  EXPECT_EQ(plain->parser.reasoning, ReasoningFormat::kThink);
}

TEST(ToolPrepTest, ResponseFormatsCompile) {
  NEED_QWEN3();
  for (const char* rf : {
           R"({"response_format": {"type": "json_object"}})",
           R"({"response_format": {"type": "json_schema", "json_schema":
               {"name": "x", "strict": true, "schema": {"type": "object",
               "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}})",
           R"({"structured_outputs": {"regex": "[0-9]{3}"}})",
           R"({"guided_choice": ["yes", "no"]})",
           R"({"guided_grammar": "root ::= \"a\" | \"b\""})"}) {
    Json body = J(R"({"messages": [{"role": "user", "content": "x"}]})");
    const Json more = J(rf);
    for (const auto& [k, v] : more.items()) body[k] = v;
    auto p = PrepareRequest(Chat(body), *Qwen3());
    ASSERT_TRUE(p.ok()) << rf << ": " << p.status();
    EXPECT_TRUE(p->constraint.has_value()) << rf;
  }
}

// A bad input's error: PrepareRequest (or the translator) fails with
// INVALID_ARGUMENT containing `want`.
void ExpectRefused(const Json& body, const std::string& want) {
  auto api = ParseChatRequest(body);
  absl::Status s = api.status();
  if (api.ok()) s = PrepareRequest(api->prompts.at(0), *Qwen3()).status();
  ASSERT_FALSE(s.ok()) << body.dump();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(want), std::string::npos) << s << " wanted: " << want;
}

TEST(ToolPrepTest, BadInputIsRefusedNamingTheField) {
  NEED_QWEN3();
  ExpectRefused(ToolRequest(R"({"tool_choice": {"type": "function",
                                "function": {"name": "get_time"}}})"),
                "tool_choice names 'get_time', which is not among the 1 tools "
                "given (get_weather)");
  ExpectRefused(J(R"({"messages": [{"role": "user", "content": "x"}],
                      "tool_choice": "required"})"),
                "tool_choice 'required' needs at least one tool");
  ExpectRefused(J(R"({"messages": [{"role": "user", "content": "x"},
      {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
       "function": {"name": "f", "arguments": "{not json"}}]}]})"),
                "messages[1].tool_calls[0].arguments is not a JSON object");
  ExpectRefused(J(R"({"messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema":
      {"schema": {"type": "nonsense"}}}})"),
                "sampling.constraint: json_schema does not compile: Unsupported "
                "type \"nonsense\"");
  ExpectRefused(J(R"({"messages": [{"role": "user", "content": "x"}],
      "guided_regex": "(unclosed"})"),
                "sampling.constraint: regex does not compile");
  ExpectRefused(J(R"({"messages": [{"role": "user", "content": "x"}],
      "guided_grammar": "root ::= nowhere"})"),
                "sampling.constraint: grammar does not compile");
  ExpectRefused(ToolRequest(R"({"tool_choice": "required",
      "response_format": {"type": "json_object"}})"),
                "cannot be combined with a tool_choice that forces a call");
  ExpectRefused(J(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "bad name"}}]})"),
                "tools[0].name 'bad name' must be 1 to 64 of");
  ExpectRefused(J(R"({"messages": [{"role": "user", "content": "x"}],
      "guided_regex": "a", "guided_choice": ["b"]})"),
                "2 output constraints are given");
  ExpectRefused(J(R"({"messages": [{"role": "user", "content": "x"}],
      "max_reasoning_tokens": -3})"),
                "max_reasoning_tokens -3 must be >= 0");
}

TEST(OpenAiToolJsonTest, MessageAndDeltaShapes) {
  v1::Delta d;
  d.set_reasoning_text("think");
  v1::ToolCallDelta* c = d.add_tool_calls();
  c->set_index(0);
  c->set_id("call_1");
  c->set_name("f");
  c->set_arguments("{\"a\": 1}");
  const Json whole = ChatMessageJson(d, /*whole=*/true);
  EXPECT_TRUE(whole["content"].is_null());
  EXPECT_EQ(whole["reasoning_content"], "think");
  EXPECT_EQ(whole["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(whole["tool_calls"][0]["type"], "function");
  EXPECT_EQ(whole["tool_calls"][0]["function"]["arguments"], "{\"a\": 1}");
  EXPECT_FALSE(whole["tool_calls"][0].contains("index"));
  v1::Delta piece;
  v1::ToolCallDelta* p = piece.add_tool_calls();
  p->set_index(0);
  p->set_arguments("}");
  const Json delta = ChatMessageJson(piece, /*whole=*/false);
  EXPECT_FALSE(delta.contains("content"));
  EXPECT_EQ(delta["tool_calls"][0]["index"], 0);
  EXPECT_FALSE(delta["tool_calls"][0].contains("id"));
  EXPECT_FALSE(delta["tool_calls"][0]["function"].contains("name"));
}

TEST(AnthropicToolsTest, BlocksBecomeMessages) {
  const Json body = J(R"({"max_tokens": 10, "thinking": {"type": "enabled",
      "budget_tokens": 64},
      "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "tool", "name": "get_weather"},
      "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": [
          {"type": "thinking", "thinking": "use the tool", "signature": "s"},
          {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
          {"type": "tool_result", "tool_use_id": "toolu_1", "content": "21 C"},
          {"type": "text", "text": "And tomorrow?"}]}]})");
  auto api = ParseMessagesRequest(body, /*for_count=*/false);
  ASSERT_TRUE(api.ok()) << api.status();
  const v1::GenerateRequest& r = api->prompts[0];
  ASSERT_EQ(r.messages_size(), 4);
  EXPECT_EQ(r.messages(1).reasoning_content(), "use the tool");
  ASSERT_EQ(r.messages(1).tool_calls_size(), 1);
  EXPECT_EQ(Json::parse(r.messages(1).tool_calls(0).arguments())["city"], "Paris");
  EXPECT_EQ(r.messages(2).role(), "tool");
  EXPECT_EQ(r.messages(2).tool_call_id(), "toolu_1");
  EXPECT_EQ(r.messages(2).content(), "21 C");
  EXPECT_EQ(r.messages(3).content(), "And tomorrow?");
  EXPECT_EQ(r.tool_choice().mode(), v1::ToolChoice::MODE_FUNCTION);
  EXPECT_EQ(r.max_reasoning_tokens(), 64);
  EXPECT_TRUE(r.chat_template_kwargs().fields().at("enable_thinking").bool_value());
}

TEST(AnthropicToolsTest, StreamOpensOneBlockPerKind) {
  auto f = MakeMessagesFormat();
  const ResponseMeta meta{"msg_1", 1700000000, "m"};
  std::string sse = f->StreamStart(meta, 1, 5);
  v1::Delta a;
  a.set_reasoning_text("hmm");
  sse += f->StreamDelta(meta, 0, a);
  v1::Delta b;
  b.set_text("Let me check.");
  v1::ToolCallDelta* c = b.add_tool_calls();
  c->set_index(0);
  c->set_id("call_x");
  c->set_name("get_weather");
  c->set_arguments("{\"city\":");
  sse += f->StreamDelta(meta, 0, b);
  v1::Delta d;
  v1::ToolCallDelta* e = d.add_tool_calls();
  e->set_index(0);
  e->set_arguments(" \"Paris\"}");
  sse += f->StreamDelta(meta, 0, d);
  v1::Final fin;
  fin.set_finish_reason(v1::FINISH_REASON_TOOL_CALLS);
  sse += f->StreamEnd(meta, fin, v1::Usage());
  std::vector<std::string> events;
  std::string partial;
  for (size_t pos = 0; (pos = sse.find("data: ", pos)) != std::string::npos;) {
    const size_t end = sse.find("\n\n", pos);
    const Json j = Json::parse(sse.substr(pos + 6, end - pos - 6));
    std::string t = j["type"];
    if (t == "content_block_start") t += ":" + j["content_block"]["type"].get<std::string>();
    if (j.contains("index")) t += "@" + std::to_string(j["index"].get<int>());
    if (t.rfind("content_block_delta", 0) == 0 &&
        j["delta"]["type"] == "input_json_delta") {
      partial += j["delta"]["partial_json"].get<std::string>();
    }
    if (j["type"] == "message_delta") EXPECT_EQ(j["delta"]["stop_reason"], "tool_use");
    events.push_back(t);
    pos = end;
  }
  const std::vector<std::string> want = {
      "message_start", "ping", "content_block_start:thinking@0",
      "content_block_delta@0", "content_block_stop@0",
      "content_block_start:text@1", "content_block_delta@1",
      "content_block_stop@1", "content_block_start:tool_use@2",
      "content_block_delta@2", "content_block_delta@2",
      "content_block_stop@2", "message_delta", "message_stop"};
  EXPECT_EQ(events, want);
  EXPECT_EQ(Json::parse(partial)["city"], "Paris");
}

}  // namespace
}  // namespace pdserve::frontend
