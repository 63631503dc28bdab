// `pdserve generate` end to end on stories260K: greedy ids equal the
// transformers reference, text streams on stdout with speeds on stderr,
// seeded sampling is reproducible, bad arguments exit 2.

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/cli_run.h"

namespace {

using ::testing::HasSubstr;

const std::string kBinary =
    std::string(PDSERVE_BINARY_DIR) + "/server/cli/pdserve";
const std::string kStories =
    std::string(PDSERVE_SHARED_DIR) + "/models/stories260K/stories260K.bin";
const std::string kTok =
    std::string(PDSERVE_SHARED_DIR) + "/models/stories260K/tok512.bin";

using Result = ::pdserve::testing::CliResult;

Result RunGenerate(const std::string& args) {
  return ::pdserve::testing::RunCli("", kBinary, "generate " + args);
}

class GenerateCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kBinary)) GTEST_SKIP() << kBinary << " absent";
    if (!std::filesystem::exists(kStories)) GTEST_SKIP() << kStories << " absent";
  }
};

TEST_F(GenerateCliTest, GreedyIdsMatchTheTransformersReference) {
  std::ifstream in(std::string(PDSERVE_TESTDATA_DIR) +
                   "/parity/stories260K/expected.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  std::string prompt, want;
  for (int id : meta["prompt_ids"]) prompt += std::to_string(id) + " ";
  for (int id : meta["decode_ids"]) {
    want += (want.empty() ? "" : " ") + std::to_string(id);
  }
  const Result r = RunGenerate("--model " + kStories + " --prompt-ids '" + prompt +
                       "' -n 16 --ids --ignore-eos --threads 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, want + "\n");
  EXPECT_THAT(r.err, HasSubstr("prefill: 16 tokens"));
  EXPECT_THAT(r.err, HasSubstr("decode: 15 tokens"));
}

TEST_F(GenerateCliTest, StreamsTextWithoutThePrompt) {
  const Result r = RunGenerate("--model " + kStories + " --tokenizer " + kTok +
                       " --prompt 'Once upon a time' -n 40 --threads 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_GT(r.out.size(), 20u);
  EXPECT_EQ(r.out.find("Once upon a time"), std::string::npos) << r.out;
  EXPECT_THAT(r.err, HasSubstr("tok/s"));
}

TEST_F(GenerateCliTest, SeededSamplingIsReproducible) {
  const std::string args = "--model " + kStories + " --tokenizer " + kTok +
                           " --prompt 'Lily' -n 30 --temperature 0.9 "
                           "--top-p 0.95 --top-k 40 --ignore-eos --ids ";
  const Result a = RunGenerate(args + "--seed 7");
  const Result b = RunGenerate(args + "--seed 7");
  const Result c = RunGenerate(args + "--seed 8");
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
}

TEST_F(GenerateCliTest, BadArgumentsExit2WithAMessage) {
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"--prompt hi", "--model is required"},
      {"--model " + kStories + " --prompt hi --prompt-ids 1",
       "exactly one of --prompt and --prompt-ids"},
      {"--model " + kStories + " --prompt-ids 1 -n 0", "-n must be >= 1"},
      {"--model " + kStories + " --prompt-ids 1 --temperature -1",
       "temperature = -1"},
      {"--model " + kStories + " --prompt-ids 1 --top-p 2", "top_p = 2"},
      {"--model " + kStories + " --prompt-ids 1 --bogus", "unknown option"},
      {"--model " + kStories + " --prompt-ids 1 -n x", "'x' is not a number"},
  };
  for (const Case& c : cases) {
    const Result r = RunGenerate(c.args);
    EXPECT_EQ(r.code, 2) << c.args;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.args;
    EXPECT_THAT(r.err, HasSubstr("usage: pdserve generate"));
  }
  const Result r = RunGenerate("--model " + kStories + " --prompt-ids '1 999' --ids");
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("id 999 outside the vocabulary [0, 512)"));
}

}  // namespace
