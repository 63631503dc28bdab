// Helpers shared by the tokenizer tests: shared-data paths and the
// llama.cpp vocab-test file format.
#ifndef PDSERVE_TESTS_SERVER_TOKENIZER_TEST_UTIL_H_
#define PDSERVE_TESTS_SERVER_TOKENIZER_TEST_UTIL_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "server/tokenizer/tokenizer.h"
#include "server/tokenizer/unicode.h"

namespace pdserve::testing {

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline bool Exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

inline std::string SharedDir() { return PDSERVE_SHARED_DIR; }
inline std::string CacheDir() {
  const char* cache = std::getenv("PDSERVE_CACHE");
  const char* home = std::getenv("HOME");
  return cache ? std::string(cache)
               : std::string(home ? home : "") + "/.cache/pdserve";
}
// llama.cpp's vocabulary test file ggml-vocab-<name>.gguf: in the shared
// data, else in the pinned llama.cpp sources the peer benchmarks unpack
// ($PDSERVE_CACHE/peers/llamacpp/src/*/vendor/llama.cpp/models); the shared
// path (absent) when neither has it.
inline std::string VocabTestPath(const std::string& name) {
  const std::string file = "ggml-vocab-" + name + ".gguf";
  const std::string shared = SharedDir() + "/tokenizers/vocab-tests/" + file;
  if (Exists(shared)) return shared;
  std::error_code ec;
  const std::filesystem::path src = CacheDir() + "/peers/llamacpp/src";
  for (const auto& e : std::filesystem::directory_iterator(src, ec)) {
    const auto p = e.path() / "vendor/llama.cpp/models" / file;
    if (Exists(p.string()) && Exists(p.string() + ".inp")) return p.string();
  }
  return shared;
}
inline std::string Qwen3JsonPath() {
  return SharedDir() + "/tokenizers/qwen3/tokenizer.json";
}
inline std::string SmolLmPath() {
  return CacheDir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// One test case of a llama.cpp vocab test: text and expected ids.
struct VocabCase {
  std::string text;
  std::vector<int> ids;
};

// Parses X.gguf.inp (texts separated by "\n__ggml_vocab_test__\n", one
// after each text) and X.gguf.out (one line of ids per text).
inline std::vector<VocabCase> ReadVocabCases(const std::string& gguf_path) {
  const std::string inp = ReadAll(gguf_path + ".inp");
  const std::string out = ReadAll(gguf_path + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<VocabCase> cases;
  size_t pos = 0;
  while (pos < inp.size()) {
    size_t next = inp.find(sep, pos);
    if (next == std::string::npos) next = inp.size();
    cases.push_back({inp.substr(pos, next - pos), {}});
    pos = next + sep.size();
  }
  std::istringstream lines(out);
  std::string line;
  for (VocabCase& c : cases) {
    if (!std::getline(lines, line)) break;
    std::istringstream ids(line);
    int id;
    while (ids >> id) c.ids.push_back(id);
  }
  return cases;
}

// A tokenizer loaded once per process (nullptr when `path` is absent).
inline const Tokenizer* LoadCached(const std::string& path) {
  static auto* cache = new std::map<std::string, std::unique_ptr<Tokenizer>>();
  auto it = cache->find(path);
  if (it != cache->end()) return it->second.get();
  std::unique_ptr<Tokenizer> tok;
  if (Exists(path)) {
    auto loaded = Tokenizer::Load(path);
    if (loaded.ok()) tok = *std::move(loaded);
  }
  return (*cache)[path] = std::move(tok), (*cache)[path].get();
}

// Random valid UTF-8 drawn from mixed ranges: ASCII, whitespace variety,
// controls, Latin-1, combining marks, CJK, Hangul, emoji, any BMP and
// astral code point (surrogates and U+2581, SentencePiece's space mark,
// excluded).
inline std::string RandomText(std::mt19937& rng, int max_chars) {
  static const uint32_t kSpaces[] = {' ',  '\t',   '\n',   '\r',
                                     0xA0, 0x3000, 0x2003, 0x85};
  std::uniform_int_distribution<int> len_dist(0, max_chars);
  std::uniform_int_distribution<int> kind_dist(0, 11);
  std::string out;
  const int n = len_dist(rng);
  for (int i = 0; i < n; ++i) {
    auto in = [&](uint32_t lo, uint32_t hi) {
      return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
    };
    uint32_t cp;
    switch (kind_dist(rng)) {
      case 0:
      case 1:
      case 2:
        cp = in(0x20, 0x7E);
        break;
      case 3:
        cp = kSpaces[in(0, 7)];
        break;
      case 4:
        cp = in(0, 0x1F);
        break;
      case 5:
        cp = in(0xC0, 0xFF);
        break;
      case 6:
        cp = in(0x300, 0x36F);
        break;
      case 7:
        cp = in(0x4E00, 0x9FFF);
        break;
      case 8:
        cp = in(0xAC00, 0xD7A3);
        break;
      case 9:
        cp = in(0x1F300, 0x1FAFF);
        break;
      case 10:
        cp = in(0x80, 0xFFFD);
        break;
      default:
        cp = in(0x10000, 0x10FFFF);
        break;
    }
    if ((cp >= 0xD800 && cp < 0xE000) || cp == 0x2581) cp = 'x';
    unicode::AppendUtf8(cp, &out);
  }
  return out;
}

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_SERVER_TOKENIZER_TEST_UTIL_H_
