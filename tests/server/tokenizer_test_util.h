// Helpers shared by the tokenizer tests: shared-data paths and the
// llama.cpp vocab-test file format.
#ifndef PDSERVE_TESTS_SERVER_TOKENIZER_TEST_UTIL_H_
#define PDSERVE_TESTS_SERVER_TOKENIZER_TEST_UTIL_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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
inline std::string VocabTestPath(const std::string& name) {
  return SharedDir() + "/tokenizers/vocab-tests/ggml-vocab-" + name + ".gguf";
}
inline std::string Qwen3JsonPath() {
  return SharedDir() + "/tokenizers/qwen3/tokenizer.json";
}
inline std::string SmolLmPath() {
  const char* cache = std::getenv("PDSERVE_CACHE");
  const char* home = std::getenv("HOME");
  const std::string root = cache ? std::string(cache)
                                 : std::string(home ? home : "") + "/.cache/pdserve";
  return root + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
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

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_SERVER_TOKENIZER_TEST_UTIL_H_
