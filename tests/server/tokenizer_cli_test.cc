// `pdserve tokenize`: the command's run function, linked in directly.
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/cli/command.h"
#include "tests/server/tokenizer_test_util.h"

namespace pdserve::cli {
namespace {
Command g_tokenize{};
}  // namespace

// Stands in for main.cc's registry: keeps the tokenize command.
bool RegisterCommand(const Command& command) {
  if (!std::strcmp(command.name, "tokenize")) g_tokenize = command;
  return true;
}

namespace {

struct Result {
  int code;
  std::string out;
};

Result RunTokenize(std::vector<std::string> args) {
  args.insert(args.begin(), "pdserve tokenize");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int code = g_tokenize.run(static_cast<int>(argv.size()), argv.data());
  Result r{code, ::testing::internal::GetCapturedStdout()};
  ::testing::internal::GetCapturedStderr();
  return r;
}

TEST(TokenizerTokenizeCommandTest, PrintsIds) {
  ASSERT_NE(g_tokenize.run, nullptr);
  const std::string path = testing::VocabTestPath("qwen2");
  if (!testing::Exists(path)) GTEST_SKIP() << path << " absent";
  Result r = RunTokenize({"--model", path, "--", "Hello", "world"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "9707 1879\n");
  r = RunTokenize({"--model", path, "--special", "--", "<|im_end|>"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "151645\n");
  r = RunTokenize({"--model", path, "--", "<|im_end|>"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out, "151645\n");
}

TEST(TokenizerTokenizeCommandTest, UsageAndLoadErrors) {
  ASSERT_NE(g_tokenize.run, nullptr);
  EXPECT_EQ(RunTokenize({"--", "text"}).code, 2);
  EXPECT_EQ(RunTokenize({"--bogus"}).code, 2);
  EXPECT_EQ(RunTokenize({"--model", "/nonexistent.gguf", "--", "x"}).code, 1);
}

}  // namespace
}  // namespace pdserve::cli
