// The streaming reply parsers (server/chat/output_parser.h): reasoning and
// tool calls of each model family, fed every split of the reply into chunks
// (each byte boundary, byte by byte, random multi-way splits), must give
// exactly what the whole reply parsed at once gives.
#include "server/chat/output_parser.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

using Json = nlohmann::json;

struct Parsed {
  std::string content, reasoning;
  struct Call {
    std::string id, name, arguments;
    bool operator==(const Call&) const = default;
  };
  std::vector<Call> calls;
  bool operator==(const Parsed&) const = default;
};

void PrintTo(const Parsed& p, std::ostream* os) {
  *os << "{content: " << Json(p.content).dump() << ", reasoning: "
      << Json(p.reasoning).dump() << ", calls: [";
  for (const Parsed::Call& c : p.calls) {
    *os << "{" << c.id << " " << c.name << " " << Json(c.arguments).dump() << "}";
  }
  *os << "]}";
}

void Merge(const ParsedDelta& d, Parsed* p) {
  p->content += d.content;
  p->reasoning += d.reasoning;
  for (const ToolCallDelta& c : d.tool_calls) {
    ASSERT_GE(c.index, 0);
    ASSERT_LE(c.index, static_cast<int>(p->calls.size()));
    if (c.index == static_cast<int>(p->calls.size())) {
      ASSERT_FALSE(c.name.empty()) << "a call's first piece names it";
      p->calls.push_back({c.id, c.name, ""});
    } else {
      EXPECT_TRUE(c.name.empty()) << "only the first piece carries the name";
    }
    p->calls[c.index].arguments += c.arguments;
  }
}

Parsed ParseChunks(const OutputParserOptions& options,
                   const std::vector<std::string>& chunks) {
  OutputParser parser(options);
  Parsed p;
  for (const std::string& c : chunks) Merge(parser.Feed(c), &p);
  Merge(parser.Finish(), &p);
  return p;
}

// Every 2-way split, byte by byte, and random 3..12-way splits.
void ExpectSplitInvariant(const OutputParserOptions& options,
                          const std::string& text, const Parsed& expected) {
  const Parsed whole = ParseChunks(options, {text});
  EXPECT_EQ(whole, expected) << "whole: " << text;
  for (size_t k = 1; k < text.size(); ++k) {
    ASSERT_EQ(ParseChunks(options, {text.substr(0, k), text.substr(k)}), whole)
        << "split at byte " << k << " of: " << text;
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.push_back(std::string(1, c));
  ASSERT_EQ(ParseChunks(options, bytes), whole) << "byte by byte: " << text;
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<size_t> cuts = {0, text.size()};
    const int pieces = 3 + static_cast<int>(rng() % 10);
    for (int i = 0; i < pieces; ++i) cuts.push_back(rng() % (text.size() + 1));
    std::sort(cuts.begin(), cuts.end());
    std::vector<std::string> chunks;
    for (size_t i = 1; i < cuts.size(); ++i) {
      chunks.push_back(text.substr(cuts[i - 1], cuts[i] - cuts[i - 1]));
    }
    ASSERT_EQ(ParseChunks(options, chunks), whole) << "round " << round;
  }
}

OutputParserOptions Options(ReasoningFormat r, ToolCallFormat t,
                            bool starts_in = false) {
  OutputParserOptions o;
  o.reasoning = r;
  o.tool_calls = t;
  o.starts_in_reasoning = starts_in;
  o.call_id_seed = "chatcmpl-1-0";
  return o;
}

std::string Id(int i) { return ToolCallId("chatcmpl-1-0", i); }

TEST(ReasoningTest, Qwen3ThinkBlockIsSeparated) {
  const std::string reply =
      "<think>\nThe user wants 2+2. That is 4.\n</think>\n\nThe answer is 4.";
  Parsed want;
  want.reasoning = "\nThe user wants 2+2. That is 4.\n";
  want.content = "The answer is 4.";
  ExpectSplitInvariant(Options(ReasoningFormat::kThink, ToolCallFormat::kNone),
                       reply, want);
}

TEST(ReasoningTest, PromptOpenedReasoning) {
  // DeepSeek-R1 / Qwen3.5: the template opened <think>; the reply ends it.
  const std::string reply = "Let me think < about </thin k> it.\n</think>\n\nDone.";
  Parsed want;
  want.reasoning = "Let me think < about </thin k> it.\n";
  want.content = "Done.";
  ExpectSplitInvariant(
      Options(ReasoningFormat::kThink, ToolCallFormat::kNone, true), reply, want);
}

TEST(ReasoningTest, UnfinishedReasoningStaysReasoning) {
  Parsed want;
  want.reasoning = "\nstill thinking </thi";
  ExpectSplitInvariant(Options(ReasoningFormat::kThink, ToolCallFormat::kNone),
                       "<think>\nstill thinking </thi", want);
}

TEST(ReasoningTest, NoThinkBlockIsAllContent) {
  Parsed want;
  want.content = "  <thin is not a tag; <think> later is text";
  ExpectSplitInvariant(Options(ReasoningFormat::kThink, ToolCallFormat::kNone),
                       want.content, want);
}

TEST(ReasoningTest, EmptyThinkBlock) {
  Parsed want;
  want.content = "Hi!";
  want.reasoning = "\n\n";
  ExpectSplitInvariant(Options(ReasoningFormat::kThink, ToolCallFormat::kNone),
                       "<think>\n\n</think>\n\nHi!", want);
}

TEST(HermesTest, Qwen3ReplyWithThinkingAndTwoCalls) {
  const std::string reply =
      "<think>\nI need the weather and the time.\n</think>\n\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Z\\u00fcrich\", \"days\": 3, \"units\": {\"t\": \"C\"}}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  Parsed want;
  want.reasoning = "\nI need the weather and the time.\n";
  want.calls = {{Id(0), "get_weather",
                 "{\"city\": \"Z\\u00fcrich\", \"days\": 3, \"units\": {\"t\": \"C\"}}"},
                {Id(1), "get_time", "{}"}};
  ExpectSplitInvariant(Options(ReasoningFormat::kThink, ToolCallFormat::kHermes),
                       reply, want);
}

TEST(HermesTest, TextBeforeCallAndArgumentsFirst) {
  const std::string reply =
      "Let me look that up.\n<tool_call>\n{\"arguments\": {\"q\": \"a}b\\\"c\"}, "
      "\"name\": \"search\"}\n</tool_call>";
  Parsed want;
  want.content = "Let me look that up.\n";
  want.calls = {{Id(0), "search", "{\"q\": \"a}b\\\"c\"}"}};
  ExpectSplitInvariant(Options(ReasoningFormat::kNone, ToolCallFormat::kHermes),
                       reply, want);
}

TEST(HermesTest, StringArgumentsAreDecoded) {
  const std::string reply =
      "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>";
  Parsed want;
  want.calls = {{Id(0), "f", "{\"x\": 1}"}};
  ExpectSplitInvariant(Options(ReasoningFormat::kNone, ToolCallFormat::kHermes),
                       reply, want);
}

TEST(HermesTest, CallWithoutNameIsContent) {
  const std::string reply = "<tool_call>\nnot json at all\n</tool_call> ok";
  Parsed want;
  want.content = reply;
  ExpectSplitInvariant(Options(ReasoningFormat::kNone, ToolCallFormat::kHermes),
                       reply, want);
}

TEST(HermesTest, UnterminatedCallKeepsItsName) {
  const std::string reply = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2";
  Parsed want;
  want.calls = {{Id(0), "f", "{\"a\": [1, 2"}};
  ExpectSplitInvariant(Options(ReasoningFormat::kNone, ToolCallFormat::kHermes),
                       reply, want);
}

TEST(HermesTest, NoToolsMeansContent) {
  const std::string reply = "<tool_call>{\"name\": \"f\"}</tool_call>";
  Parsed want;
  want.content = reply;
  ExpectSplitInvariant(Options(ReasoningFormat::kNone, ToolCallFormat::kNone),
                       reply, want);
}

TEST(Qwen3CoderTest, XmlCallWithTypedParameters) {
  OutputParserOptions o = Options(ReasoningFormat::kThink, ToolCallFormat::kQwen3Coder);
  o.tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "detail": {"type": "object"}, "zip": {"type": "string"}}}}}])");
  const std::string reply =
      "<think>\nweather\n</think>\n\n<tool_call>\n<function=get_weather>\n"
      "<parameter=city>\nSan Francisco\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n"
      "<parameter=detail>\n{\"hourly\": true}\n</parameter>\n"
      "<parameter=zip>\n94107\n</parameter>\n"
      "</function>\n</tool_call>";
  Parsed want;
  want.reasoning = "\nweather\n";
  want.calls = {{Id(0), "get_weather",
                 "{\"city\": \"San Francisco\", \"days\": 3, \"detail\": "
                 "{\"hourly\":true}, \"zip\": \"94107\"}"}};
  ExpectSplitInvariant(o, reply, want);
  EXPECT_TRUE(Json::accept(want.calls[0].arguments));
}

TEST(Qwen3CoderTest, TwoCallsNoParameters) {
  const std::string reply =
      "Sure.\n<tool_call>\n<function=now>\n</function>\n</tool_call>\n"
      "<tool_call>\n<function=echo>\n<parameter=text>\na < b\n</parameter>\n"
      "</function>\n</tool_call>\n";
  Parsed want;
  want.content = "Sure.\n";
  want.calls = {{Id(0), "now", "{}"}, {Id(1), "echo", "{\"text\": \"a < b\"}"}};
  ExpectSplitInvariant(
      Options(ReasoningFormat::kNone, ToolCallFormat::kQwen3Coder), reply, want);
}

TEST(Llama3JsonTest, CallsAfterPythonTag) {
  const std::string reply =
      "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": "
      "\"Paris\"}}; {\"name\": \"get_time\", \"parameters\": {\"tz\": \"CET\"}}";
  Parsed want;
  want.calls = {{Id(0), "get_weather", "{\"city\": \"Paris\"}"},
                {Id(1), "get_time", "{\"tz\": \"CET\"}"}};
  ExpectSplitInvariant(
      Options(ReasoningFormat::kNone, ToolCallFormat::kLlama3Json), reply, want);
}

TEST(Llama3JsonTest, PlainJsonCallAndPlainText) {
  Parsed want;
  want.calls = {{Id(0), "f", "{\"n\": 12}"}};
  ExpectSplitInvariant(
      Options(ReasoningFormat::kNone, ToolCallFormat::kLlama3Json),
      "  {\"name\": \"f\", \"parameters\": {\"n\": 12}}", want);
  Parsed text;
  text.content = "The capital of France is Paris {really}.";
  ExpectSplitInvariant(
      Options(ReasoningFormat::kNone, ToolCallFormat::kLlama3Json), text.content,
      text);
  Parsed object;
  object.content = "{\"answer\": 4} and more";
  ExpectSplitInvariant(
      Options(ReasoningFormat::kNone, ToolCallFormat::kLlama3Json),
      object.content, object);
}

TEST(FormatTest, DetectionAndNames) {
  EXPECT_EQ(DetectToolCallFormat("{{'<tool_call>'}}"), ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat("<tool_call>\n<function="), ToolCallFormat::kQwen3Coder);
  EXPECT_EQ(DetectToolCallFormat("<|python_tag|>"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(DetectReasoningFormat("<think>"), ReasoningFormat::kThink);
  EXPECT_EQ(DetectReasoningFormat("{{ x }}"), ReasoningFormat::kNone);
  EXPECT_TRUE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(PromptOpensReasoning("<think>\n\n</think>\n\n"));
  EXPECT_EQ(*ParseToolCallFormat("qwen3_coder"), ToolCallFormat::kQwen3Coder);
  EXPECT_FALSE(ParseToolCallFormat("bogus").ok());
  EXPECT_NE(ToolCallId("a", 0), ToolCallId("a", 1));
  EXPECT_EQ(ToolCallId("a", 0).size(), 29u);
}

}  // namespace
}  // namespace pdserve
