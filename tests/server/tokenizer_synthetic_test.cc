// Tiny synthetic GGUF vocabularies (written with GgufWriter): SentencePiece
// merges by score with byte fallback, byte-level BPE merges by rank, special
// tokens, and the loader's errors. Needs no shared data.
#include <string>
#include <vector>

#include "engine/formats/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/tokenizer/bpe.h"
#include "server/tokenizer/tokenizer.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;
using Ids = std::vector<int32_t>;

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadWritten(
    const GgufWriter& w, const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name + ".gguf";
  if (absl::Status s = w.WriteFile(path); !s.ok()) return s;
  return Tokenizer::Load(path);
}

// <unk> <s> </s> <0x00>..<0xFF> then pieces with scores.
GgufWriter SpmWriter() {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int64_t> types = {2, 3, 3};
  std::vector<float> scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
    scores.push_back(0);
  }
  // id 259.. : pieces; higher score merges first.
  const std::pair<const char*, float> pieces[] = {{"\xE2\x96\x81", -1},
                                                  {"h", -2},
                                                  {"e", -2},
                                                  {"l", -2},
                                                  {"o", -2},
                                                  {"ll", -3},
                                                  {"he", -4},
                                                  {"hell", -5},
                                                  {"hello", -6},
                                                  {"\xE2\x96\x81hello", -7},
                                                  {"w", -2},
                                                  {"\xE2\x96\x81w", -8},
                                                  {"\xE4\xB8\xAD", -2}};
  for (const auto& [text, score] : pieces) {
    tokens.push_back(text);
    types.push_back(1);
    scores.push_back(score);
  }
  GgufWriter w;
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetIntArray("tokenizer.ggml.token_type", GgufValue::Type::kInt32, types);
  w.SetFloat32Array("tokenizer.ggml.scores", scores);
  w.SetUint32("tokenizer.ggml.bos_token_id", 1);
  w.SetUint32("tokenizer.ggml.eos_token_id", 2);
  w.SetUint32("tokenizer.ggml.unknown_token_id", 0);
  return w;
}

TEST(TokenizerSyntheticTest, SentencePieceMergesByScoreWithByteFallback) {
  auto tok = LoadWritten(SpmWriter(), "spm");
  ASSERT_TRUE(tok.ok()) << tok.status();
  const int32_t kSpace = 259, kHello = 267, kSpaceHello = 268, kW = 269,
                kSpaceW = 270, kZhong = 271;
  EXPECT_EQ(*(*tok)->Encode("hello"), (Ids{kSpaceHello}));
  EXPECT_EQ(*(*tok)->Encode("hello w"), (Ids{kSpaceHello, kSpaceW}));
  // "x" is not a piece: byte fallback <0x78> = 3 + 0x78.
  EXPECT_EQ(*(*tok)->Encode("hellox"), (Ids{kSpaceHello, 3 + 0x78}));
  EXPECT_EQ(*(*tok)->Encode("xhello"), (Ids{kSpace, 3 + 0x78, kHello}));
  EXPECT_EQ(*(*tok)->Encode("\xE4\xB8\xAD\xE6\x96\x87"),
            (Ids{kSpace, kZhong, 3 + 0xE6, 3 + 0x96, 3 + 0x87}));
  EXPECT_EQ(*(*tok)->Encode("w", true), (Ids{kSpaceW}));
  EXPECT_EQ(*(*tok)->Encode("</s>w", true), (Ids{2, kSpaceW}));
  EXPECT_EQ(*(*tok)->Encode(""), Ids{});
  for (const char* s :
       {"hello", "hello w", "hellox", "  x\n", "\xE4\xB8\xAD\xE6\x96\x87"}) {
    EXPECT_EQ((*tok)->Decode(*(*tok)->Encode(s)), s);
  }
  EXPECT_EQ((*tok)->TokenBytes(3 + 0xE6), "\xE6");
  EXPECT_EQ((*tok)->TokenBytes(kW), "w");
  EXPECT_EQ((*tok)->TokenBytes(kSpaceW), " w");
  EXPECT_TRUE((*tok)->add_bos());
  EXPECT_TRUE((*tok)->add_space_prefix());
  EXPECT_EQ((*tok)->stop_ids(), Ids{2});
}

TEST(TokenizerSyntheticTest, SentencePieceWithoutSpacePrefix) {
  GgufWriter w = SpmWriter();
  w.SetBool("tokenizer.ggml.add_space_prefix", false);
  w.SetBool("tokenizer.ggml.add_bos_token", false);
  auto tok = LoadWritten(w, "spm_noprefix");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(*(*tok)->Encode("hello"), Ids{267});
  EXPECT_FALSE((*tok)->add_bos());
  EXPECT_EQ((*tok)->Decode(Ids{268}), " hello");
}

// 256 byte tokens in GPT-2's byte-level form, then merged tokens and one
// control token.
GgufWriter BpeWriter() {
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(ByteToUnicode(static_cast<uint8_t>(b)));
    types.push_back(1);
  }
  for (const char* t :
       {"he", "ll", "hell", "hello", "\xC4\xA0h", "\xC4\xA0hello"}) {
    tokens.push_back(t);  // ids 256..261 ("Ġ" is U+0120)
    types.push_back(1);
  }
  tokens.push_back("<|end|>");  // 262
  types.push_back(3);
  GgufWriter w;
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", "gpt-2");
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetIntArray("tokenizer.ggml.token_type", GgufValue::Type::kInt32, types);
  // Ranks: "l l" before "h e" matters for "hell".
  w.SetStringArray("tokenizer.ggml.merges",
                   {"l l", "h e", "he ll", "hell o", "\xC4\xA0 h",
                    "\xC4\xA0h ello", "\xC4\xA0h ell"});
  w.SetUint32("tokenizer.ggml.eos_token_id", 262);
  return w;
}

TEST(TokenizerSyntheticTest, ByteLevelBpeMergesByRank) {
  auto tok = LoadWritten(BpeWriter(), "bpe");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(*(*tok)->Encode("hello"), Ids{259});
  // Lowest rank first, not leftmost: " he" merges "h e" (rank 1) before
  // "Ġ h" (rank 4) could apply.
  EXPECT_EQ(*(*tok)->Encode(" he"), (Ids{32, 256}));
  EXPECT_EQ(*(*tok)->Encode(" h"), Ids{260});
  EXPECT_EQ(*(*tok)->Encode(" hello"), (Ids{32, 259}));  // Ġ is byte 0x20
  EXPECT_EQ(*(*tok)->Encode("hello!"), (Ids{259, '!'}));
  EXPECT_EQ(*(*tok)->Encode("hello<|end|>", true), (Ids{259, 262}));
  EXPECT_EQ((*tok)->Encode("hello<|end|>", false)->back(), '>');
  EXPECT_EQ((*tok)->Decode(*(*tok)->Encode("hello <|end|>", true)),
            "hello <|end|>");
  EXPECT_EQ((*tok)->stop_ids(), Ids{262});
  EXPECT_FALSE((*tok)->add_bos());
  EXPECT_FALSE((*tok)->add_space_prefix());
  EXPECT_EQ((*tok)->FindToken("<|end|>"), 262);
  EXPECT_EQ((*tok)->FindToken(" h"), 260);
}

TEST(TokenizerSyntheticTest, LoaderErrorsNameTheProblem) {
  {
    GgufWriter w = BpeWriter();
    w.SetString("tokenizer.ggml.model", "bert");
    auto tok = LoadWritten(w, "bert");
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(std::string(tok.status().message()), HasSubstr("'bert'"));
  }
  {
    GgufWriter w = BpeWriter();
    w.SetString("tokenizer.ggml.pre", "falcon");
    auto tok = LoadWritten(w, "falcon");
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(std::string(tok.status().message()), HasSubstr("'falcon'"));
  }
  {
    GgufWriter w = BpeWriter();
    w.SetIntArray("tokenizer.ggml.token_type", GgufValue::Type::kInt32, {1, 1});
    auto tok = LoadWritten(w, "types");
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(tok.status().message()),
                HasSubstr("2 entries for 263 tokens"));
  }
  {
    GgufWriter w = BpeWriter();
    w.SetUint32("tokenizer.ggml.eos_token_id", 5000);
    auto tok = LoadWritten(w, "eos");
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(tok.status().message()),
                HasSubstr("5000 is outside the vocabulary of 263"));
  }
  {
    GgufWriter w = SpmWriter();
    w.SetFloat32Array("tokenizer.ggml.scores", {0, 0});
    auto tok = LoadWritten(w, "scores");
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(tok.status().message()), HasSubstr("2 scores"));
  }
}

}  // namespace
}  // namespace pdserve
