// Golden tests: every case in tests/data/chat/*_goldens.json was rendered by
// transformers' apply_chat_template (tests/tools/chat_make_goldens.py); the
// C++ ChatTemplate must produce the same bytes.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/chat/chat_template.h"

namespace pdserve {
namespace {

using Json = nlohmann::ordered_json;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string DataPath(const std::string& name) {
  return std::string(PDSERVE_TESTDATA_DIR) + "/chat/" + name;
}

ChatMessage MessageFromJson(const Json& j) {
  ChatMessage m;
  m.role = j.at("role").get<std::string>();
  m.content = j.at("content").get<std::string>();
  if (j.contains("reasoning_content")) {
    m.reasoning_content = j["reasoning_content"].get<std::string>();
  }
  if (j.contains("tool_call_id")) m.tool_call_id = j["tool_call_id"].get<std::string>();
  if (j.contains("name")) m.name = j["name"].get<std::string>();
  if (j.contains("tool_calls")) {
    for (const Json& c : j["tool_calls"]) {
      ChatToolCall call;
      if (c.contains("id")) call.id = c["id"].get<std::string>();
      call.name = c["function"]["name"].get<std::string>();
      call.arguments = c["function"]["arguments"];
      m.tool_calls.push_back(call);
    }
  }
  return m;
}

void RunGoldenFile(const std::string& file, int min_cases) {
  std::string text = ReadFile(DataPath(file));
  ASSERT_FALSE(text.empty()) << "missing fixture " << file;
  Json doc = Json::parse(text);
  int n = 0;
  for (const Json& c : doc.at("cases")) {
    std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    std::string source = c.contains("template")
                             ? c["template"].get<std::string>()
                             : ReadFile(DataPath(c.at("template_file").get<std::string>()));
    ASSERT_FALSE(source.empty());
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Create(
        source, c.at("bos_token").get<std::string>(), c.at("eos_token").get<std::string>());
    ASSERT_TRUE(t.ok()) << t.status();
    std::vector<ChatMessage> messages;
    for (const Json& m : c.at("messages")) messages.push_back(MessageFromJson(m));
    ChatRenderOptions options;
    options.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    if (c.contains("enable_thinking")) options.enable_thinking = c["enable_thinking"].get<bool>();
    if (c.contains("tools")) options.tools = c["tools"];
    if (c.contains("extra")) {
      for (auto it = c["extra"].begin(); it != c["extra"].end(); ++it) {
        options.extra_variables[it.key()] = it.value();
      }
    }
    absl::StatusOr<std::string> out = t->Render(messages, options);
    if (c.contains("expected_error")) {  // the template's raise_exception
      ASSERT_FALSE(out.ok());
      EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(out.status().message()),
                  ::testing::HasSubstr(c["expected_error"].get<std::string>()));
      ++n;
      continue;
    }
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, c.at("expected").get<std::string>());
    ++n;
  }
  EXPECT_GE(n, min_cases);
}

TEST(ChatGoldenTest, Qwen3) { RunGoldenFile("qwen3_goldens.json", 20); }
TEST(ChatGoldenTest, SmolLM2ChatMl) { RunGoldenFile("smollm2_goldens.json", 7); }
TEST(ChatGoldenTest, Llama3) { RunGoldenFile("llama3_goldens.json", 7); }
TEST(ChatGoldenTest, Gemma) { RunGoldenFile("gemma_goldens.json", 6); }
TEST(ChatGoldenTest, DeepSeekR1) { RunGoldenFile("deepseek_r1_goldens.json", 5); }
TEST(ChatGoldenTest, InterpreterFeatures) { RunGoldenFile("features_goldens.json", 4); }
// Whitespace control, newline handling and value formatting snippets.
TEST(ChatGoldenTest, InterpreterSnippets) { RunGoldenFile("snippets_goldens.json", 46); }

// The committed Qwen3 template is the one shipped in ../shared.
TEST(ChatGoldenTest, Qwen3FixtureMatchesSharedTemplate) {
  std::string shared = ReadFile(std::string(PDSERVE_SHARED_DIR) +
                                "/tokenizers/qwen3/chat_template.jinja");
  if (shared.empty()) GTEST_SKIP() << "../shared not present";
  EXPECT_EQ(shared, ReadFile(DataPath("qwen3.jinja")));
  // tokenizer_config.json carries the same text under "chat_template".
  Json config = Json::parse(ReadFile(std::string(PDSERVE_SHARED_DIR) +
                                     "/tokenizers/qwen3/tokenizer_config.json"));
  EXPECT_EQ(config.at("chat_template").get<std::string>(), shared);
}

}  // namespace
}  // namespace pdserve
