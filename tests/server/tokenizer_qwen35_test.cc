// The Qwen3.5 pre-tokenizer (GGUF "qwen35"; tokenizer.json Split regex with
// [\p{L}\p{M}]+ letter runs) against tests/data/tokenizer/
// qwen35_reference.json, made by tests/tools/make_qwen35_tokenizer_vectors.py
// with the PyPI `tokenizers` package on Qwen3's tokenizer.json with the
// Qwen3.5 regex swapped in and its NFC normaliser dropped (as Qwen3.5's).
#include <fstream>
#include <string>
#include <vector>

#include "engine/formats/gguf.h"
#include "engine/formats/gguf_writer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/tokenizer/pretokenizer.h"
#include "server/tokenizer/tokenizer.h"
#include "server/tokenizer/unicode.h"
#include "tests/server/tokenizer_test_util.h"

namespace pdserve {
namespace {

using ::pdserve::testing::Exists;
using ::pdserve::testing::ReadAll;

struct Case {
  std::string text;
  std::vector<int32_t> ids;        // Qwen3.5 regex
  std::vector<int32_t> qwen2_ids;  // the unmodified Qwen3 tokenizer.json
  std::vector<std::string> pieces;
};

struct Fixture {
  std::string regex;
  std::string qwen2_regex;
  std::vector<Case> cases;
};

const Fixture& Reference() {
  static const Fixture* f = [] {
    const auto doc =
        nlohmann::json::parse(ReadAll(std::string(PDSERVE_TESTDATA_DIR) +
                                      "/tokenizer/qwen35_reference.json"));
    auto* out = new Fixture;
    out->regex = doc["regex"].get<std::string>();
    out->qwen2_regex = doc["qwen2_regex"].get<std::string>();
    for (const auto& c : doc["cases"]) {
      out->cases.push_back({c["text"].get<std::string>(),
                            c["ids"].get<std::vector<int32_t>>(),
                            c["qwen2_ids"].get<std::vector<int32_t>>(),
                            c["pieces"].get<std::vector<std::string>>()});
    }
    return out;
  }();
  return *f;
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

// Encodes every case and expects its Qwen3.5 ids (its Qwen2 ids when
// `qwen2`); decoding gives back the text (Qwen2: its NFC form; Qwen3.5
// does not normalise).
void ExpectIds(const Tokenizer& tok, bool qwen2) {
  const Fixture& f = Reference();
  ASSERT_GE(f.cases.size(), 40u);
  for (const Case& c : f.cases) {
    auto ids = tok.Encode(c.text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, qwen2 ? c.qwen2_ids : c.ids) << "text: '" << c.text << "'";
    EXPECT_EQ(tok.Decode(*ids), qwen2 ? unicode::ToNfc(c.text) : c.text);
  }
}

// Qwen3's tokenizer.json with its Split regex replaced by `regex` and,
// as Qwen3.5's, no NFC normaliser.
std::string WriteJsonWithRegex(const std::string& regex,
                               const std::string& name) {
  auto doc = nlohmann::json::parse(ReadAll(testing::Qwen3JsonPath()));
  auto& pattern = doc["pre_tokenizer"]["pretokenizers"][0]["pattern"];
  EXPECT_EQ(pattern["Regex"].get<std::string>(), Reference().qwen2_regex);
  pattern["Regex"] = regex;
  doc["normalizer"] = nullptr;
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << doc.dump();
  return path;
}

TEST(TokenizerQwen35Test, NameRegexAndMarkClass) {
  auto kind = PreTokenizerFromGgufName("qwen35");
  ASSERT_TRUE(kind.ok()) << kind.status();
  EXPECT_EQ(*kind, PreTokenizerKind::kQwen35);
  EXPECT_STREQ(PreTokenizerName(*kind), "qwen35");
  // The reference regex text is what tokenizer.json files carry.
  EXPECT_EQ(PreTokenizerRegex(*kind), Reference().regex);
  EXPECT_EQ(PreTokenizerRegex(PreTokenizerKind::kQwen2),
            Reference().qwen2_regex);
  using unicode::Flags;
  using unicode::kMark;
  EXPECT_TRUE(Flags(0x301) & kMark);    // combining acute (Mn)
  EXPECT_TRUE(Flags(0x93E) & kMark);    // Devanagari sign aa (Mc)
  EXPECT_TRUE(Flags(0x20E3) & kMark);   // combining enclosing keycap (Me)
  EXPECT_TRUE(Flags(0xFE0F) & kMark);   // variation selector-16 (Mn)
  EXPECT_TRUE(Flags(0xE0100) & kMark);  // variation selector-17, astral
  EXPECT_FALSE(Flags('a') & kMark);
  EXPECT_FALSE(Flags(0x200D) & kMark);   // ZWJ is Cf
  EXPECT_FALSE(Flags(0x1F44D) & kMark);  // emoji
}

TEST(TokenizerQwen35Test, MarksJoinLettersAndLeavePunctuation) {
  using V = std::vector<std::string>;
  // "\u0301" is a combining acute accent, "\u0915\u094D" Devanagari ka +
  // virama.
  EXPECT_EQ(Split(PreTokenizerKind::kQwen35, "x\u0303y !\u0301? \u0915\u094D"),
            (V{"x\u0303y", " !", "\u0301", "?", " \u0915\u094D"}));
  EXPECT_EQ(Split(PreTokenizerKind::kQwen2, "x\u0303y !\u0301? \u0915\u094D"),
            (V{"x", "\u0303y", " !\u0301?", " \u0915", "\u094D"}));
}

// Pieces of the Split alone, as the reference regex engine cuts them; the
// Qwen2 pre-tokenizer must cut some of them differently.
TEST(TokenizerQwen35Test, PiecesMatchTheReferenceRegex) {
  int differ = 0;
  for (const Case& c : Reference().cases) {
    EXPECT_EQ(Split(PreTokenizerKind::kQwen35, c.text), c.pieces)
        << "text: '" << c.text << "'";
    differ += Split(PreTokenizerKind::kQwen2, c.text) != c.pieces;
  }
  EXPECT_GE(differ, 20);
}

TEST(TokenizerQwen35Test, HfTokenizerJsonIds) {
  if (!Exists(testing::Qwen3JsonPath())) {
    GTEST_SKIP() << testing::Qwen3JsonPath() << " absent";
  }
  auto tok = Tokenizer::Load(
      WriteJsonWithRegex(Reference().regex, "qwen35_tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  ExpectIds(**tok, /*qwen2=*/false);
  // The same vocabulary with its own (Qwen2) regex gives the other ids, and
  // those differ from the Qwen3.5 ones on some strings.
  auto qwen2 = Tokenizer::Load(testing::Qwen3JsonPath());
  ASSERT_TRUE(qwen2.ok()) << qwen2.status();
  ExpectIds(**qwen2, /*qwen2=*/true);
  int differ = 0;
  for (const Case& c : Reference().cases) differ += c.ids != c.qwen2_ids;
  EXPECT_GE(differ, 5);
}

TEST(TokenizerQwen35Test, UnknownRegexVariantIsRejected) {
  if (!Exists(testing::Qwen3JsonPath())) {
    GTEST_SKIP() << testing::Qwen3JsonPath() << " absent";
  }
  std::string regex = Reference().regex;
  regex.replace(regex.find("\\p{M}"), 5, "\\p{Mn}");
  auto tok = Tokenizer::Load(WriteJsonWithRegex(regex, "qwen35_bad.json"));
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kUnimplemented);
}

// llama.cpp's qwen35 GGUF: the Qwen2 vocab-test GGUF (Qwen3's vocabulary)
// rewritten with tokenizer.ggml.pre = "qwen35" (no NFC composition first).
TEST(TokenizerQwen35Test, GgufQwen35Ids) {
  const std::string src = testing::VocabTestPath("qwen2");
  if (!Exists(src)) GTEST_SKIP() << src << " absent";
  auto file = GgufFile::Open(src);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->tensors().empty());
  GgufWriter w;
  for (const auto& [key, value] : (*file)->metadata()) w.SetValue(key, value);
  w.SetString("tokenizer.ggml.pre", "qwen35");
  const std::string path = ::testing::TempDir() + "/qwen35_vocab.gguf";
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto tok = Tokenizer::Load(path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  ExpectIds(**tok, /*qwen2=*/false);
}

}  // namespace
}  // namespace pdserve
