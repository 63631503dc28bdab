// Streaming detokenizer: UTF-8-safe deltas, SentencePiece space rules, stop
// strings across token boundaries, Finish().
#include "server/tokenizer/tokenizer.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/tokenizer/detokenizer.h"
#include "server/tokenizer/unicode.h"
#include "tests/server/tokenizer_test_util.h"

namespace pdserve {
namespace {

using ::pdserve::testing::LoadCached;
using ::pdserve::testing::RandomText;

std::vector<std::string> StreamAll(const Tokenizer& tok,
                                   const std::vector<int32_t>& ids,
                                   Detokenizer::Options options) {
  Detokenizer d(tok, std::move(options));
  std::vector<std::string> deltas;
  for (int32_t id : ids) deltas.push_back(d.Feed(id));
  deltas.push_back(d.Finish());
  return deltas;
}

std::string Join(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) s += p;
  return s;
}

std::vector<std::string> VocabPaths() {
  return {testing::VocabTestPath("qwen2"), testing::VocabTestPath("llama-spm"),
          testing::VocabTestPath("gpt-2"),
          testing::SharedDir() + "/models/stories260K/tok512.bin"};
}

TEST(TokenizerDetokenizerTest, RandomIdsConcatenateToTheFullDecode) {
  int checked = 0;
  for (const std::string& path : VocabPaths()) {
    const Tokenizer* tok = LoadCached(path);
    if (tok == nullptr) continue;
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> id_dist(0, tok->vocab_size() - 1);
    for (int i = 0; i < 200; ++i) {
      std::vector<int32_t> ids(rng() % 30);
      for (int32_t& id : ids) id = id_dist(rng);
      const auto deltas = StreamAll(*tok, ids, {});
      for (const auto& d : deltas) {
        ASSERT_TRUE(unicode::ValidateUtf8(d).ok()) << path;
      }
      ASSERT_EQ(Join(deltas), unicode::ReplaceInvalidUtf8(
                                  tok->Decode(ids, /*skip_special=*/true)))
          << path;
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no shared vocabularies";
}

TEST(TokenizerDetokenizerTest, EncodedTextStreamsBackUnsplit) {
  int checked = 0;
  for (const std::string& path : VocabPaths()) {
    const Tokenizer* tok = LoadCached(path);
    if (tok == nullptr) continue;
    std::mt19937 rng(11);
    for (int i = 0; i < 200; ++i) {
      const std::string text = RandomText(rng, 30);
      auto ids = tok->Encode(text);
      ASSERT_TRUE(ids.ok());
      const auto deltas = StreamAll(*tok, *ids, {});
      for (const auto& d : deltas) ASSERT_TRUE(unicode::ValidateUtf8(d).ok());
      ASSERT_EQ(Join(deltas), tok->Decode(*ids)) << path;
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no shared vocabularies";
}

TEST(TokenizerDetokenizerTest, MultiTokenCharactersWaitUntilComplete) {
  for (const std::string& path :
       {testing::VocabTestPath("qwen2"), testing::VocabTestPath("llama-spm")}) {
    const Tokenizer* tok = LoadCached(path);
    if (tok == nullptr) GTEST_SKIP() << path << " absent";
    auto ids = tok->Encode("\xF0\xA0\x80\x8B");  // U+2000B, 3 or 4 tokens
    ASSERT_TRUE(ids.ok());
    ASSERT_GE(ids->size(), 2u) << path;
    Detokenizer d(*tok, {});
    std::string got;
    for (size_t i = 0; i < ids->size(); ++i) {
      const std::string delta = d.Feed((*ids)[i]);
      if (i + 1 < ids->size()) {
        // Nothing but a leading space may come out before the last byte.
        EXPECT_TRUE(delta.empty() || delta == " ") << path << " token " << i;
      }
      got += delta;
    }
    got += d.Finish();
    EXPECT_EQ(got, "\xF0\xA0\x80\x8B") << path;
  }
}

TEST(TokenizerDetokenizerTest, SentencePieceLeadingSpace) {
  const Tokenizer* tok = LoadCached(testing::VocabTestPath("llama-spm"));
  if (tok == nullptr) GTEST_SKIP() << "llama-spm absent";
  auto ids = tok->Encode("Hello world");
  ASSERT_TRUE(ids.ok());
  Detokenizer strip(*tok, {});
  EXPECT_EQ(strip.Feed((*ids)[0]), "Hello");
  EXPECT_EQ(strip.Feed((*ids)[1]), " world");
  Detokenizer::Options keep;
  keep.strip_space_prefix = false;
  Detokenizer raw(*tok, keep);
  EXPECT_EQ(raw.Feed((*ids)[0]), " Hello");
  // BOS first (skipped) does not use up the strip.
  Detokenizer after_bos(*tok, {});
  EXPECT_EQ(after_bos.Feed(tok->bos_id()), "");
  EXPECT_EQ(after_bos.Feed((*ids)[0]), "Hello");
}

TEST(TokenizerDetokenizerTest, FinishReplacesIncompleteBytes) {
  const Tokenizer* tok = LoadCached(testing::VocabTestPath("qwen2"));
  if (tok == nullptr) GTEST_SKIP() << "qwen2 absent";
  auto ids = tok->Encode("ok\xF0\xA0\x80\x8B");  // ok + U+2000B
  ASSERT_TRUE(ids.ok());
  ids->pop_back();  // drop the token with the last byte of U+2000B
  Detokenizer d(*tok, {});
  std::string got;
  for (int32_t id : *ids) got += d.Feed(id);
  EXPECT_EQ(got, "ok");
  EXPECT_EQ(d.Finish(), "\xEF\xBF\xBD");
}

// Random texts with a stop string inserted, over several vocabularies (so
// the stop string falls across token boundaries in many ways): the output
// is exactly the text before the first occurrence, and at every step the
// text held back is no longer than the longest stop string prefix (+3 bytes
// of an incomplete character).
TEST(TokenizerDetokenizerTest, StopStringsAcrossTokensAreNeverEmitted) {
  const std::vector<std::string> stops = {"\nUser:", "</answer>", "停止",
                                          "xyzzy"};
  int checked = 0;
  for (const std::string& path : VocabPaths()) {
    const Tokenizer* tok = LoadCached(path);
    if (tok == nullptr) continue;
    std::mt19937 rng(5);
    for (int i = 0; i < 200; ++i) {
      const std::string& stop = stops[i % stops.size()];
      const std::string before = RandomText(rng, 20);
      const std::string text = before + stop + RandomText(rng, 10);
      auto ids = tok->Encode(text);
      ASSERT_TRUE(ids.ok());
      const std::string decoded = tok->Decode(*ids);
      std::string expected = decoded;
      size_t first = std::string::npos;
      for (const auto& s : stops) first = std::min(first, decoded.find(s));
      ASSERT_NE(first, std::string::npos);
      expected = decoded.substr(0, first);
      Detokenizer::Options options;
      options.stop_strings = stops;
      Detokenizer d(*tok, options);
      std::string got;
      std::vector<int32_t> fed;
      for (int32_t id : *ids) {
        got += d.Feed(id);
        fed.push_back(id);
        if (d.stopped()) break;
        const size_t so_far = tok->Decode(fed).size();
        ASSERT_LE(so_far - std::min(so_far, got.size()), 8u + 3u) << path;
      }
      got += d.Finish();
      ASSERT_TRUE(d.stopped()) << path << " '" << text << "'";
      ASSERT_EQ(got, expected) << path << " '" << text << "'";
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no shared vocabularies";
}

TEST(TokenizerDetokenizerTest, HoldsOnlyAPossibleStopPrefix) {
  const Tokenizer* tok = LoadCached(testing::VocabTestPath("gpt-2"));
  if (tok == nullptr) GTEST_SKIP() << "gpt-2 absent";
  Detokenizer::Options options;
  options.stop_strings = {"STOP"};
  Detokenizer d(*tok, options);
  std::string got;
  for (const char* piece : {"Hello", " S", "T", "x", " ST", "OP", " more"}) {
    auto ids = tok->Encode(piece);
    ASSERT_TRUE(ids.ok());
    for (int32_t id : *ids) got += d.Feed(id);
    if (std::string(piece) == "T") {
      EXPECT_EQ(got, "Hello ");  // " ST" held
    }
    if (std::string(piece) == "x") {
      EXPECT_EQ(got, "Hello STx");
    }
  }
  EXPECT_EQ(got, "Hello STx ");
  EXPECT_TRUE(d.stopped());
  EXPECT_EQ(d.stop_index(), 0);
  EXPECT_EQ(d.Feed(0), "");
  EXPECT_EQ(d.Finish(), "");
}

}  // namespace
}  // namespace pdserve
