#include "scheduler/cli_args.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::vector<FlagSpec> kSpecs = {
    {"port", true, ""}, {"model", true, ""}, {"json", false, ""}};

absl::StatusOr<CliArgs> Parse(std::vector<std::string> argv) {
  std::vector<char*> p;
  for (auto& a : argv) p.push_back(a.data());
  return CliArgs::Parse(static_cast<int>(p.size()), p.data(), kSpecs);
}

TEST(CliArgsTest, ParsesFormsAndPositionals) {
  auto a = Parse({"x", "--port", "7", "--model=m.gguf", "--json", "hello", "world"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a->Int("port", 0), 7);
  EXPECT_EQ(a->String("model", ""), "m.gguf");
  EXPECT_TRUE(a->Bool("json"));
  EXPECT_THAT(a->positional(), ElementsAre("hello", "world"));
  EXPECT_THAT(Parse({"x", "--nope"}).status().message(), HasSubstr("unknown flag --nope"));
  EXPECT_THAT(Parse({"x", "--port"}).status().message(), HasSubstr("needs a value"));
  EXPECT_THAT(Parse({"x", "--port", "abc"})->Int("port", 0).status().message(),
              HasSubstr("'abc' is not an integer"));
}

TEST(CliArgsTest, ConfigGivesDefaultsTheCommandLineOverrides) {
  auto a = Parse({"x", "--port", "7"});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(a->ApplyConfigJson(
                   R"({"engine": {"port": 9, "model": "a.gguf", "json": true},
                       "common": {"other": 1}})",
                   "engine", kSpecs)
                  .ok());
  EXPECT_EQ(*a->Int("port", 0), 7);
  EXPECT_EQ(a->String("model", ""), "a.gguf");
  EXPECT_TRUE(a->Bool("json"));
  EXPECT_THAT(a->ApplyConfigJson(R"({"engine": {"bogus": 1}})", "engine", kSpecs)
                  .message(),
              HasSubstr("unknown key \"bogus\""));
  EXPECT_EQ(a->ApplyConfigJson("{", "engine", kSpecs).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdserve::cli
