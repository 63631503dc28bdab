// libFuzzer target: the tokenizers. The first byte picks the mode:
//  even: the rest is a tokenizer.json; VocabFromHfJson + BuildTokenizer,
//        then encode and decode a fixed text;
//  odd:  the rest is text, encoded (plain and with special tokens parsed)
//        and decoded by the Qwen3 byte-level BPE tokenizer of ../shared
//        (or, without it, a small SentencePiece-style vocabulary built
//        here), checking that the ids are inside the vocabulary.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>

#include "server/tokenizer/loaders.h"
#include "server/tokenizer/tokenizer.h"
#include "server/tokenizer/vocab.h"

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A tokenizer.json of a small SentencePiece-style BPE with byte fallback.
std::string SmallSpmJson() {
  std::string vocab = R"("<unk>": 0, "<s>": 1, "</s>": 2)";
  int id = 3;
  for (int b = 0; b < 256; ++b) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    vocab += ", \"" + std::string(hex) + "\": " + std::to_string(id++);
  }
  for (const char* piece : {"\u2581", "a", "b", "c", "\u2581a", "ab", "\u2581ab"}) {
    vocab += ", \"" + std::string(piece) + "\": " + std::to_string(id++);
  }
  return R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {)" + vocab +
         R"(}, "merges": ["\u2581 a", "a b", "\u2581a b"]},
      "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
      "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}]},
      "added_tokens": [{"id": 0, "content": "<unk>", "special": true},
                       {"id": 1, "content": "<s>", "special": true},
                       {"id": 2, "content": "</s>", "special": true}]})";
}

const pdserve::Tokenizer* FixedTokenizer() {
  static const pdserve::Tokenizer* tok = [] {
    std::string json = ReadFile(std::string(PDSERVE_SHARED_DIR) +
                                "/tokenizers/qwen3/tokenizer.json");
    if (json.empty()) json = SmallSpmJson();
    auto vocab = pdserve::VocabFromHfJson(json, "");
    if (!vocab.ok()) std::abort();
    auto built = pdserve::BuildTokenizer(*std::move(vocab));
    if (!built.ok()) std::abort();
    return built->release();
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1,
                              size - 1);
  if (data[0] % 2 == 0) {
    auto vocab = pdserve::VocabFromHfJson(rest, "");
    if (!vocab.ok()) return 0;
    auto tok = pdserve::BuildTokenizer(*std::move(vocab));
    if (!tok.ok()) return 0;
    auto ids = (*tok)->Encode("Hello w\xc3\xb6rld <s> 123", true);
    if (ids.ok()) (void)(*tok)->Decode(*ids);
    return 0;
  }
  const pdserve::Tokenizer* tok = FixedTokenizer();
  for (bool special : {false, true}) {
    auto ids = tok->Encode(rest, special);
    if (!ids.ok()) continue;
    for (int32_t id : *ids) {
      if (id < 0 || id >= tok->vocab_size()) std::abort();
    }
    (void)tok->Decode(*ids);
  }
  return 0;
}
