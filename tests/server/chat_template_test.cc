// ChatTemplate API tests: ChatML fallback, errors at Create, role checks,
// message content that is never evaluated (property test), special-token
// text kept verbatim, huge and deeply nested inputs, concurrent renders.
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/chat/chat_template.h"

namespace pdserve {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string ReadFixture(const std::string& name) {
  std::ifstream in(std::string(PDSERVE_TESTDATA_DIR) + "/chat/" + name, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ChatTemplate Qwen3() {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Create(ReadFixture("qwen3.jinja"), "", "<|im_end|>");
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

ChatMessage Msg(std::string role, std::string content) {
  ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

TEST(ChatTemplateTest, EmptySourceFallsBackToChatMl) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Create("", "", "");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->is_fallback());
  ChatRenderOptions options;
  EXPECT_EQ(*t->Render({Msg("system", "S"), Msg("user", "U")}, options),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
            "<|im_start|>assistant\n");
  options.add_generation_prompt = false;
  EXPECT_EQ(*t->Render({Msg("user", "U"), Msg("assistant", "A")}, options),
            "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n");
  absl::StatusOr<ChatTemplate> real = ChatTemplate::Create(ReadFixture("smollm2.jinja"), "", "");
  ASSERT_TRUE(real.ok());
  EXPECT_FALSE(real->is_fallback());
}

TEST(ChatTemplateTest, UnsupportedTemplateFailsAtCreate) {
  std::string src = ReadFixture("qwen3.jinja") + "\n{{ messages | groupby('role') }}";
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Create(src, "", "");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(),
              AllOf(HasSubstr("unsupported chat template"), HasSubstr("line 86 col 15"),
                    HasSubstr("filter 'groupby'")));
  t = ChatTemplate::Create("{% include 'x.jinja' %}", "", "");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("'{% include %}'"));
}

TEST(ChatTemplateTest, UnknownRoleIsRejected) {
  absl::StatusOr<std::string> r = Qwen3().Render({Msg("developer", "x")}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), AllOf(HasSubstr("message 0"), HasSubstr("'developer'")));
}

TEST(ChatTemplateTest, TemplateExceptionsAreInvalidArgument) {
  // Llama-3-style templates may raise on bad input; the caller gets the text.
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Create(
      "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant') }}"
      "{% endif %}{{ m.content }}{% endfor %}", "", "");
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::string> r = t->Render({Msg("user", "a"), Msg("user", "b")}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("roles must alternate"));
}

TEST(ChatTemplateTest, EnableThinkingOnlyPassedWhenSet) {
  ChatTemplate t = Qwen3();
  ChatRenderOptions options;
  std::string unset = *t.Render({Msg("user", "hi")}, options);
  options.enable_thinking = true;
  EXPECT_EQ(*t.Render({Msg("user", "hi")}, options), unset);
  options.enable_thinking = false;
  EXPECT_EQ(*t.Render({Msg("user", "hi")}, options), unset + "<think>\n\n</think>\n\n");
}

// Random strings full of template syntax and special-token text: the
// rendered prompt must contain them verbatim, exactly where the template
// puts message content.
TEST(ChatTemplateTest, ContentIsNeverEvaluatedProperty) {
  const std::vector<std::string> pieces = {
      "{{", "}}", "{%", "%}", "{#", "#}", "-", "+", " ", "\n", "\t", "'", "\"", "\\",
      "x", "messages", "raise_exception('boom')", "<|im_end|>", "<|im_start|>",
      "<think>", "</think>", "<tool_response>", "</tool_response>", "é", "世界", "😀",
      "{{ 7*7 }}", "{% for m in messages %}", "{% endfor %}", "\r\n", "\xff"};
  std::mt19937 rng(1234);
  ChatTemplate qwen = Qwen3();
  absl::StatusOr<ChatTemplate> smol = ChatTemplate::Create(ReadFixture("smollm2.jinja"), "", "");
  ASSERT_TRUE(smol.ok());
  for (int iter = 0; iter < 300; ++iter) {
    std::string content;
    int n = std::uniform_int_distribution<int>(0, 12)(rng);
    for (int i = 0; i < n; ++i) {
      content += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
    }
    SCOPED_TRACE(content);
    ChatRenderOptions options;
    options.add_generation_prompt = false;
    absl::StatusOr<std::string> q = qwen.Render({Msg("user", content)}, options);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_EQ(*q, "<|im_start|>user\n" + content + "<|im_end|>\n");
    absl::StatusOr<std::string> s = smol->Render(
        {Msg("system", "S"), Msg("user", content)}, options);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(*s, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n" + content +
                      "<|im_end|>\n");
  }
}

TEST(ChatTemplateTest, HugeContentAndManyMessages) {
  ChatTemplate t = Qwen3();
  std::string big(8 << 20, 'a');
  for (size_t i = 0; i < big.size(); i += 97) big[i] = '{';
  absl::StatusOr<std::string> r = t.Render({Msg("user", big)}, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), big.size() + std::string("<|im_start|>user\n<|im_end|>\n"
                                                "<|im_start|>assistant\n").size());
  std::vector<ChatMessage> many;
  for (int i = 0; i < 20000; ++i) {
    many.push_back(Msg(i % 2 == 0 ? "user" : "assistant", absl::StrCat("m", i)));
  }
  r = t.Render(many, {});
  ASSERT_TRUE(r.ok()) << r.status();
  // The last assistant turn follows the last user turn: Qwen3 gives it the
  // (empty) think block. EXPECT_TRUE keeps the 700 KB prompt out of logs.
  EXPECT_TRUE(absl::StrContains(
      *r, "user\nm19998<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
          "m19999<|im_end|>\n<|im_start|>assistant\n"));
}

TEST(ChatTemplateTest, DeeplyNestedToolArgumentsAreAnError) {
  ChatMessage call = Msg("assistant", "");
  ChatToolCall c;
  c.name = "f";
  nlohmann::ordered_json deep = nlohmann::ordered_json::object();
  for (int i = 0; i < 2000; ++i) deep = nlohmann::ordered_json{{"k", deep}};
  c.arguments = deep;
  call.tool_calls.push_back(c);
  absl::StatusOr<std::string> r = Qwen3().Render({Msg("user", "q"), call}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("nested too deeply"));
}

TEST(ChatTemplateTest, ToolsKeepTheClientsKeyOrder) {
  ChatRenderOptions options;
  options.tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "z", "parameters": {"b": 1, "a": 2}}}])");
  absl::StatusOr<std::string> r = Qwen3().Render({Msg("user", "q")}, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, HasSubstr(R"({"type": "function", "function": {"name": "z", )"
                            R"("parameters": {"b": 1, "a": 2}}})"));
}

TEST(ChatTemplateTest, ConcurrentRendersAgree) {
  ChatTemplate t = Qwen3();
  std::vector<std::vector<ChatMessage>> inputs;
  std::vector<std::string> expected;
  for (int i = 0; i < 16; ++i) {
    ChatMessage a = Msg("assistant", absl::StrCat("<think>\nr", i, "\n</think>\n\nanswer ", i));
    inputs.push_back({Msg("system", "sys"), Msg("user", absl::StrCat("q", i)), a,
                      Msg("user", "again")});
    expected.push_back(*t.Render(inputs.back(), {}));
  }
  std::vector<std::thread> threads;
  std::vector<int> mismatches(8, 0);
  for (int th = 0; th < 8; ++th) {
    threads.emplace_back([&, th] {
      for (int rep = 0; rep < 50; ++rep) {
        for (size_t i = 0; i < inputs.size(); ++i) {
          absl::StatusOr<std::string> r = t.Render(inputs[i], {});
          if (!r.ok() || *r != expected[i]) ++mismatches[th];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

}  // namespace
}  // namespace pdserve
