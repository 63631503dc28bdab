// The local tools' flag tables (config/tool_options.h): forms, positionals,
// types, ranges and the layers, through the same door as the processes.
#include "config/tool_options.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// No environment, no default config file.
Layers Empty() {
  Layers layers;
  layers.getenv = [](const char*) -> const char* { return nullptr; };
  layers.default_config_paths.clear();
  return layers;
}

template <typename O>
absl::StatusOr<Command<O>> Parse(const FlagTable<O>& table,
                                 std::vector<std::string> argv,
                                 const Layers& layers = Empty()) {
  argv.insert(argv.begin(), "pdserve");
  std::vector<char*> p;
  for (auto& a : argv) p.push_back(a.data());
  return ParseCommand(table, static_cast<int>(p.size()), p.data(), layers);
}

TEST(ChatFlagsTest, DefaultsFormsAndPositionals) {
  auto none = Parse(ChatFlagTable(), {});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->options.target, "127.0.0.1:50051");
  EXPECT_EQ(none->options.max_tokens, 0);
  EXPECT_FALSE(none->options.seed.has_value());
  EXPECT_FALSE(none->options.raw);

  auto c = Parse(ChatFlagTable(),
                 {"--target", "h:7", "--max-tokens=12", "--raw", "--seed",
                  "-3", "--temperature", "0.7", "hello", "world"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.target, "h:7");
  EXPECT_EQ(c->options.max_tokens, 12);
  EXPECT_TRUE(c->options.raw);
  EXPECT_EQ(c->options.seed, -3);
  EXPECT_DOUBLE_EQ(c->options.temperature, 0.7);
  EXPECT_THAT(c->resolution.positional, ElementsAre("hello", "world"));
  EXPECT_TRUE(Parse(ChatFlagTable(), {"-h"})->resolution.help);
}

TEST(ChatFlagsTest, RefusesWithTheNumbers) {
  auto message = [](std::vector<std::string> argv) {
    auto c = Parse(ChatFlagTable(), std::move(argv));
    EXPECT_FALSE(c.ok());
    return std::string(c.status().message());
  };
  EXPECT_THAT(message({"--max-tokens", "-1"}),
              HasSubstr("--max-tokens -1 is outside 0..2147483647"));
  EXPECT_THAT(message({"--top-k", "3000000000"}),
              HasSubstr("--top-k 3000000000 is outside 0..2147483647"));
  EXPECT_THAT(message({"--temperature", "-0.5"}),
              HasSubstr("--temperature -0.5 must be a number >= 0"));
  EXPECT_THAT(message({"--seed", "x"}), HasSubstr("'x' is not an integer"));
  EXPECT_THAT(message({"--nope"}), HasSubstr("unknown flag --nope"));
  EXPECT_THAT(message({"--target"}), HasSubstr("--target needs a value"));
}

TEST(ChatFlagsTest, EnvironmentBeatsDefaultAndFlagBeatsEnvironment) {
  Layers layers = Empty();
  layers.getenv = [](const char* name) -> const char* {
    return std::string(name) == "PDSERVE_CHAT_TARGET" ? "env:1" : nullptr;
  };
  EXPECT_EQ(Parse(ChatFlagTable(), {}, layers)->options.target, "env:1");
  EXPECT_EQ(Parse(ChatFlagTable(), {"--target", "flag:2"}, layers)
                ->options.target,
            "flag:2");
}

TEST(SimulateFlagsTest, CostFieldsStayEmptyUnlessGiven) {
  auto s = Parse(SimulateFlagTable(), {"--trace", "t.csv"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->options.budget, 512);
  EXPECT_EQ(s->options.chunk, 256);
  EXPECT_EQ(s->options.pages, 8192);
  EXPECT_DOUBLE_EQ(s->options.itl_slowdown, 1.5);
  EXPECT_FALSE(s->options.fixed_ms.has_value());
  EXPECT_FALSE(s->options.decode_seq_ms.has_value());
  auto given = Parse(SimulateFlagTable(),
                     {"--trace", "t.csv", "--fixed-ms", "3.5", "--chunk", "0"});
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->options.fixed_ms, 3.5);
  EXPECT_EQ(given->options.chunk, 0);
}

TEST(SimulateFlagsTest, RefusesWithTheNumbers) {
  EXPECT_THAT(Parse(SimulateFlagTable(), {"--budget", "0"}).status().message(),
              HasSubstr("--budget 0 must be >= 1"));
  EXPECT_THAT(
      Parse(SimulateFlagTable(), {"--fixed-ms", "-1"}).status().message(),
      HasSubstr("--fixed-ms -1 must be a number >= 0"));
  EXPECT_THAT(
      Parse(SimulateFlagTable(), {"--itl-slowdown", "-2"}).status().message(),
      HasSubstr("--itl-slowdown -2 must be a number >= 0"));
  EXPECT_THAT(Parse(SimulateFlagTable(), {"--json=maybe"}).status().message(),
              HasSubstr("--json"));
}

}  // namespace
}  // namespace pdserve::config
