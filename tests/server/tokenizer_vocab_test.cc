// The llama.cpp vocabulary test vectors, the Qwen3 tokenizer.json path and
// the SmolLM2 / stories260K fixtures.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/tokenizer/tokenizer.h"
#include "tests/server/tokenizer_test_util.h"

namespace pdserve {
namespace {

using ::pdserve::testing::Exists;
using ::pdserve::testing::ReadVocabCases;
using ::pdserve::testing::VocabTestPath;

class TokenizerVocabTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerVocabTest, MatchesReferenceIdsAndRoundTrips) {
  const std::string path = VocabTestPath(GetParam());
  if (!Exists(path)) GTEST_SKIP() << path << " absent";
  auto tok = Tokenizer::Load(path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const auto cases = ReadVocabCases(path);
  ASSERT_GE(cases.size(), 40u);
  for (const auto& c : cases) {
    auto ids = (*tok)->Encode(c.text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    std::vector<int> got(ids->begin(), ids->end());
    EXPECT_EQ(got, c.ids) << "text: '" << c.text << "'";
    EXPECT_EQ((*tok)->Decode(*ids), c.text);
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, TokenizerVocabTest,
                         ::testing::Values("qwen2", "qwen35", "gpt-2",
                                           "llama-bpe", "llama-spm"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(TokenizerQwen3JsonTest, SameIdsAsQwen2Gguf) {
  const std::string gguf = VocabTestPath("qwen2");
  const std::string json = testing::Qwen3JsonPath();
  if (!Exists(gguf) || !Exists(json)) GTEST_SKIP() << "shared data absent";
  auto a = Tokenizer::Load(gguf);
  auto b = Tokenizer::Load(json);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->eos_id(), 151645);  // <|im_end|> per tokenizer_config.json
  EXPECT_FALSE((*b)->chat_template().empty());
  std::vector<std::string> texts;
  for (const auto& c : ReadVocabCases(gguf)) texts.push_back(c.text);
  texts.push_back("<|im_start|>user\nhi<|im_end|>\n<|endoftext|>");
  texts.push_back("Cafe\xCC\x81 and caf\xC3\xA9 \xE1\x84\x80\xE1\x85\xA1");
  for (const std::string& t : texts) {
    for (bool special : {false, true}) {
      auto ia = (*a)->Encode(t, special);
      auto ib = (*b)->Encode(t, special);
      ASSERT_TRUE(ia.ok() && ib.ok());
      EXPECT_EQ(*ia, *ib) << t;
    }
  }
}

}  // namespace
}  // namespace pdserve
