// Property tests over random Unicode: round trips, the invalid UTF-8 error,
// special-token parsing on and off, stop ids, load errors.
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/tokenizer/tokenizer.h"
#include "server/tokenizer/unicode.h"
#include "tests/server/tokenizer_test_util.h"

namespace pdserve {
namespace {

using ::pdserve::testing::LoadCached;
using ::pdserve::testing::RandomText;
using ::testing::HasSubstr;

struct Vocab {
  const char* name;
  std::string path;
  bool nfc;
};

std::vector<Vocab> AllVocabs() {
  const std::string shared = testing::SharedDir();
  return {
      {"qwen2", testing::VocabTestPath("qwen2"), true},
      {"gpt-2", testing::VocabTestPath("gpt-2"), false},
      {"llama-bpe", testing::VocabTestPath("llama-bpe"), false},
      {"llama-spm", testing::VocabTestPath("llama-spm"), false},
      {"qwen3-json", testing::Qwen3JsonPath(), true},
      {"tok512", shared + "/models/stories260K/tok512.bin", false},
  };
}

TEST(TokenizerPropertyTest, RandomUnicodeRoundTrips) {
  int checked = 0;
  for (const Vocab& v : AllVocabs()) {
    const Tokenizer* tok = LoadCached(v.path);
    if (tok == nullptr) continue;
    std::mt19937 rng(1234);
    for (int i = 0; i < 300; ++i) {
      const std::string text = RandomText(rng, 40);
      auto ids = tok->Encode(text);
      ASSERT_TRUE(ids.ok()) << v.name << ": " << ids.status();
      for (int32_t id : *ids) ASSERT_TRUE(id >= 0 && id < tok->vocab_size());
      const std::string expected = v.nfc ? unicode::ToNfc(text) : text;
      ASSERT_EQ(tok->Decode(*ids), expected) << v.name;
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no shared vocabularies";
}

TEST(TokenizerPropertyTest, InvalidUtf8IsAnErrorNamingTheOffset) {
  const char* kInvalid[] = {"\x80",
                            "\xC0\x80",
                            "\xFF",
                            "\xED\xA0\x80",
                            "\xE4\xB8"
                            "a",
                            "\xF4\x90\x80\x80",
                            "\xC3"};
  int checked = 0;
  for (const Vocab& v : AllVocabs()) {
    const Tokenizer* tok = LoadCached(v.path);
    if (tok == nullptr) continue;
    std::mt19937 rng(99);
    for (int i = 0; i < 100; ++i) {
      const std::string head = RandomText(rng, 10);
      const std::string tail = RandomText(rng, 10);
      const std::string text = head + kInvalid[i % 7] + tail;
      for (bool special : {false, true}) {
        auto ids = tok->Encode(text, special);
        ASSERT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(
            std::string(ids.status().message()),
            HasSubstr("byte offset " + std::to_string(head.size()) + " "));
      }
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no shared vocabularies";
}

// Encode is thread-safe (shared word cache): concurrent results equal the
// single-threaded ones.
TEST(TokenizerPropertyTest, ConcurrentEncodesAgree) {
  const Tokenizer* tok = LoadCached(testing::VocabTestPath("qwen2"));
  if (tok == nullptr) GTEST_SKIP() << "qwen2 absent";
  std::mt19937 rng(3);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back(RandomText(rng, 30));
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) expected.push_back(*tok->Encode(t));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 5; ++rep) {
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t j = (i * (k + 1) + rep) % texts.size();
          if (*tok->Encode(texts[j]) != expected[j]) ++mismatches[k];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(TokenizerSpecialTokenTest, Qwen3ParsingOnAndOff) {
  const Tokenizer* tok = LoadCached(testing::Qwen3JsonPath());
  if (tok == nullptr) GTEST_SKIP() << "qwen3 tokenizer.json absent";
  const std::string text = "<|im_start|>user\nhi<think>x</think><|im_end|>";
  auto plain = tok->Encode(text, false);
  ASSERT_TRUE(plain.ok());
  for (int32_t id : *plain)
    EXPECT_LT(id, 151643) << "special id from user text";
  EXPECT_EQ(tok->Decode(*plain), text);
  auto parsed = tok->Encode(text, true);
  ASSERT_TRUE(parsed.ok());
  const int32_t im_start = tok->FindToken("<|im_start|>");
  const int32_t im_end = tok->FindToken("<|im_end|>");
  const int32_t think = tok->FindToken("<think>");
  EXPECT_EQ(im_start, 151644);
  EXPECT_EQ(im_end, 151645);
  EXPECT_EQ(think, 151667);
  EXPECT_EQ(parsed->front(), im_start);
  EXPECT_EQ(parsed->back(), im_end);
  EXPECT_THAT(*parsed, ::testing::Contains(think));
  EXPECT_EQ(tok->Decode(*parsed), text);
  EXPECT_EQ(tok->Decode(*parsed, /*skip_special=*/true), "user\nhix");
  EXPECT_TRUE(tok->IsSpecial(im_end));
  EXPECT_FALSE(tok->IsSpecial((*plain)[0]));
  EXPECT_EQ(tok->stop_ids(), (std::vector<int32_t>{151643, 151645}));
}

TEST(TokenizerSpecialTokenTest, SentencePiecePrefixAfterSpecial) {
  const Tokenizer* tok = LoadCached(testing::VocabTestPath("llama-spm"));
  if (tok == nullptr) GTEST_SKIP() << "llama-spm absent";
  auto hello = tok->Encode("hello");
  auto parsed = tok->Encode("<s>hello", true);
  auto plain = tok->Encode("<s>hello", false);
  ASSERT_TRUE(hello.ok() && parsed.ok() && plain.ok());
  std::vector<int32_t> expected = {1};
  expected.insert(expected.end(), hello->begin(), hello->end());
  EXPECT_EQ(*parsed, expected);
  EXPECT_NE(plain->front(), 1);
  EXPECT_EQ(tok->Decode(*plain), "<s>hello");
  EXPECT_TRUE(tok->add_bos());
  EXPECT_TRUE(tok->add_space_prefix());
  EXPECT_EQ(tok->stop_ids(), (std::vector<int32_t>{2}));
}

TEST(TokenizerSpecialTokenTest, Llama3StopIds) {
  const Tokenizer* tok = LoadCached(testing::VocabTestPath("llama-bpe"));
  if (tok == nullptr) GTEST_SKIP() << "llama-bpe absent";
  EXPECT_EQ(tok->bos_id(), 128000);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_THAT(tok->stop_ids(), ::testing::IsSupersetOf({128001, 128009}));
  auto ids = tok->Encode("<|eot_id|>", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, std::vector<int32_t>{128009});
}

TEST(TokenizerLoadTest, Errors) {
  EXPECT_EQ(Tokenizer::Load("/nonexistent/tokenizer.json").status().code(),
            absl::StatusCode::kNotFound);
  const std::string dir = ::testing::TempDir();
  const std::string bad_bin = dir + "/bad_tokenizer.bin";
  {
    std::ofstream out(bad_bin, std::ios::binary);
    const int32_t header = 16;
    const float score = 0;
    const int32_t len = 1000;  // longer than the file
    out.write(reinterpret_cast<const char*>(&header), 4);
    out.write(reinterpret_cast<const char*>(&score), 4);
    out.write(reinterpret_cast<const char*>(&len), 4);
  }
  auto bin = Tokenizer::Load(bad_bin);
  EXPECT_EQ(bin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bin.status().message()), HasSubstr("length 1000"));
  const std::string bad_json = dir + "/unsupported_tokenizer.json";
  {
    std::ofstream out(bad_json);
    out << R"({"normalizer": {"type": "Lowercase"}, "pre_tokenizer": null,
              "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})";
  }
  auto json = Tokenizer::Load(bad_json);
  EXPECT_EQ(json.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(json.status().message()), HasSubstr("Lowercase"));
  // Malformed documents are errors, never exceptions.
  struct Bad {
    const char* json;
    absl::StatusCode code;
    const char* message;
  } bad[] = {
      {R"({"model": {"type": "WordPiece"}})", absl::StatusCode::kUnimplemented,
       "'WordPiece'"},
      {R"({"normalizer": null, "pre_tokenizer": {"type": "ByteLevel"},
          "model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})",
       absl::StatusCode::kInvalidArgument, "vocab entry 'a'"},
      {R"({"normalizer": null, "pre_tokenizer": {"type": "ByteLevel"},
          "model": {"type": "BPE", "vocab": {"a": 0}, "merges": [7]}})",
       absl::StatusCode::kInvalidArgument, "merge 0 is malformed"},
      {R"({"normalizer": null, "pre_tokenizer": {"type": "Whitespace"},
          "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})",
       absl::StatusCode::kUnimplemented, "Whitespace"},
      {R"([1, 2)", absl::StatusCode::kInvalidArgument, "not a JSON object"},
  };
  for (const Bad& b : bad) {
    const std::string path = dir + "/malformed_tokenizer.json";
    {
      std::ofstream out(path);
      out << (b.json[0] == '[' ? " {" : "") << b.json;
    }
    auto tok = Tokenizer::Load(path);
    EXPECT_EQ(tok.status().code(), b.code) << b.json;
    EXPECT_THAT(std::string(tok.status().message()), HasSubstr(b.message));
  }
}

TEST(TokenizerLoadTest, MinimalTokenizerJson) {
  const std::string path = ::testing::TempDir() + "/mini_tokenizer.json";
  {
    std::ofstream out(path);
    out << R"({"normalizer": null,
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
      "added_tokens": [{"id": 6, "content": "<|end|>", "special": true},
                       {"id": 7, "content": "<|begin|>", "special": true}],
      "post_processor": {"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|begin|>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}]},
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġab": 4, "c": 5},
                "merges": ["a b", "Ġ ab"]}})";
  }
  auto tok = Tokenizer::Load(path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 8);
  EXPECT_EQ((*tok)->bos_id(), 7);
  EXPECT_TRUE((*tok)->add_bos());
  EXPECT_EQ(*(*tok)->Encode("ab abc"), (std::vector<int32_t>{2, 4, 5}));
  EXPECT_EQ(*(*tok)->Encode("ab<|end|>", true), (std::vector<int32_t>{2, 6}));
  EXPECT_EQ((*tok)->stop_ids(), std::vector<int32_t>{6});
}

}  // namespace
}  // namespace pdserve
