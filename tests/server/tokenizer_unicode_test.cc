// UTF-8 validation and replacement, code point classes, NFC.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/tokenizer/pretokenizer.h"
#include "server/tokenizer/unicode.h"

namespace pdserve::unicode {
namespace {

using ::testing::HasSubstr;

TEST(TokenizerUtf8Test, ValidTextPasses) {
  EXPECT_TRUE(ValidateUtf8("").ok());
  EXPECT_TRUE(ValidateUtf8("plain ascii text, long enough for 8-byte steps").ok());
  EXPECT_TRUE(ValidateUtf8("\xC2\x80 \xE0\xA0\x80 \xEF\xBF\xBF \xF0\x90\x80\x80 "
                           "\xF4\x8F\xBF\xBF")
                  .ok());
}

TEST(TokenizerUtf8Test, ErrorNamesTheByteOffset) {
  struct Case {
    std::string text;
    std::string offset;
  } cases[] = {
      {"ab\xFF" "cd", "byte offset 2 (byte 0xFF)"},
      {"\xC0\x80", "byte offset 0 (byte 0xC0)"},         // overlong
      {"xyz\xED\xA0\x80", "byte offset 3 (byte 0xED)"},   // surrogate
      {"abc\xE4\xB8", "byte offset 3 (byte 0xE4)"},       // truncated
      {"\xF4\x90\x80\x80", "byte offset 0 (byte 0xF4)"},  // > U+10FFFF
      {"0123456789abcdef\x80", "byte offset 16 (byte 0x80)"},
  };
  for (const Case& c : cases) {
    const absl::Status s = ValidateUtf8(c.text);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.offset));
  }
}

TEST(TokenizerUtf8Test, ReplacementFollowsMaximalSubparts) {
  EXPECT_EQ(ReplaceInvalidUtf8("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(ReplaceInvalidUtf8("\xC0\xAF"), "\uFFFD\uFFFD");
  EXPECT_EQ(ReplaceInvalidUtf8("a\xF0\x9F\x98"), "a\uFFFD");
  EXPECT_EQ(ReplaceInvalidUtf8("\xF4\x90\x80\x80"), "\uFFFD\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(ReplaceInvalidUtf8("\xE4\xB8x"), "\uFFFDx");
  EXPECT_EQ(ReplaceInvalidUtf8("ok \xE4\xB8\xAD"), "ok \xE4\xB8\xAD");
}

TEST(TokenizerFlagsTest, Classes) {
  EXPECT_EQ(Flags('a'), kLetter);
  EXPECT_EQ(Flags('5'), kNumber);
  EXPECT_EQ(Flags(' '), kSpace);
  EXPECT_EQ(Flags('\n'), kSpace);
  EXPECT_EQ(Flags('_'), 0);
  EXPECT_EQ(Flags(0x3000), kSpace);        // ideographic space
  EXPECT_EQ(Flags(0xA0), kSpace);          // no-break space
  EXPECT_EQ(Flags(0x200B), 0);             // zero width space is not \s
  EXPECT_EQ(Flags(0x4E2D), kLetter);       // 中
  EXPECT_EQ(Flags(0xBD), kNumber);         // ½
  EXPECT_EQ(Flags(0x10400), kLetter);      // Deseret, above the BMP
  EXPECT_EQ(Flags(0x1F999), 0);            // emoji
  EXPECT_EQ(Flags(0x301) & kNfcUnsafe, kNfcUnsafe);
  EXPECT_EQ(Flags(0x110000), 0);
}

TEST(TokenizerNfcTest, ComposesReordersAndMapsSingletons) {
  EXPECT_EQ(ToNfc("e\xCC\x81"), "\xC3\xA9");                       // é
  EXPECT_EQ(ToNfc("\xE2\x84\xAB"), "\xC3\x85");                    // Å sign
  EXPECT_EQ(ToNfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");
  EXPECT_EQ(ToNfc("a\xCC\x82\xCC\xA3"), "\xE1\xBA\xAD");            // ậ
  EXPECT_EQ(ToNfc("A\xCC\x8A\xCC\x81"), "\xC7\xBA");                // Ǻ
  EXPECT_EQ(ToNfc("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");       // reorder
  EXPECT_EQ(ToNfc("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");     // exclusion
  EXPECT_EQ(ToNfc("\xEF\xAC\x81"), "\xEF\xAC\x81");                 // ﬁ (compat)
  EXPECT_TRUE(IsNfcQuick("plain \xC3\xA9 \xE4\xB8\xAD"));
  EXPECT_FALSE(IsNfcQuick("e\xCC\x81"));
}

TEST(TokenizerPreTokenizerTest, NamesAndRegexes) {
  EXPECT_EQ(*PreTokenizerFromGgufName("qwen2"), PreTokenizerKind::kQwen2);
  EXPECT_EQ(*PreTokenizerFromGgufName("llama-bpe"), PreTokenizerKind::kLlama3);
  EXPECT_EQ(*PreTokenizerFromGgufName("smollm"), PreTokenizerKind::kSmolLM);
  EXPECT_EQ(*PreTokenizerFromGgufName("gpt-2"), PreTokenizerKind::kGpt2);
  const auto bad = PreTokenizerFromGgufName("falcon");
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'falcon'"));
}

std::vector<std::string> Split(PreTokenizerKind kind, std::string_view text) {
  std::vector<Piece> pieces;
  PreTokenize(kind, text, &pieces);
  std::vector<std::string> out;
  for (const Piece& p : pieces) {
    out.emplace_back(text.substr(p.begin, p.end - p.begin));
  }
  return out;
}

TEST(TokenizerPreTokenizerTest, RegexSemantics) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Split(PreTokenizerKind::kGpt2, "I'll  go\t1234 x!!"),
            (V{"I", "'ll", " ", " go", "\t", "1234", " x", "!!"}));
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "WE'LL 12345\n\n  ok?\n"),
            (V{"WE", "'LL", " ", "123", "45", "\n\n", " ", " ok", "?\n"}));
  EXPECT_EQ(Split(PreTokenizerKind::kQwen2, "a 12 \"b\" x  "),
            (V{"a", " ", "1", "2", " \"", "b", "\"", " x", "  "}));
  EXPECT_EQ(Split(PreTokenizerKind::kSmolLM, "ab 12c"),
            (V{"ab", " ", "1", "2", "c"}));
}

}  // namespace
}  // namespace pdserve::unicode
