#include "config/cli_args.h"

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

}  // namespace
}  // namespace pdserve::cli
