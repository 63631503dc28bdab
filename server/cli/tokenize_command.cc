// `pdserve tokenize --model PATH [--special] -- TEXT`: prints the token ids
// of TEXT (no BOS), separated by spaces. Without TEXT, reads stdin.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>

#include "server/cli/command.h"
#include "server/tokenizer/tokenizer.h"

namespace pdserve::cli {
namespace {

constexpr char kUsage[] =
    "usage: pdserve tokenize --model PATH [--special] [-- TEXT...]\n"
    "  PATH: a GGUF file, a Hugging Face folder or tokenizer.json, or a\n"
    "        llama2.c tokenizer.bin\n"
    "  --special: parse special-token text (\"<|im_end|>\") into its id\n"
    "  TEXT: words joined by single spaces; stdin when absent\n"
    "Prints the ids separated by spaces (no BOS).\n";

int RunTokenize(int argc, char** argv) {
  std::string model;
  bool special = false;
  bool have_text = false;
  std::string text;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!std::strcmp(a, "--")) {
      for (int j = i + 1; j < argc; ++j) {
        if (j > i + 1) text += ' ';
        text += argv[j];
      }
      have_text = i + 1 < argc;
      break;
    }
    if (!std::strcmp(a, "--help") || !std::strcmp(a, "-h")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (!std::strcmp(a, "--special")) {
      special = true;
    } else if (!std::strcmp(a, "--model") && i + 1 < argc) {
      model = argv[++i];
    } else if (!std::strncmp(a, "--model=", 8)) {
      model = a + 8;
    } else {
      std::fprintf(stderr, "pdserve tokenize: unexpected argument '%s'\n%s", a,
                   kUsage);
      return 2;
    }
  }
  if (model.empty()) {
    std::fprintf(stderr, "pdserve tokenize: --model is required\n%s", kUsage);
    return 2;
  }
  if (!have_text) {
    text.assign(std::istreambuf_iterator<char>(std::cin),
                std::istreambuf_iterator<char>());
  }
  auto tok = Tokenizer::Load(model);
  if (!tok.ok()) {
    std::fprintf(stderr, "pdserve tokenize: %s\n",
                 std::string(tok.status().message()).c_str());
    return 1;
  }
  auto ids = (*tok)->Encode(text, special);
  if (!ids.ok()) {
    std::fprintf(stderr, "pdserve tokenize: %s\n",
                 std::string(ids.status().message()).c_str());
    return 1;
  }
  std::string out;
  for (size_t i = 0; i < ids->size(); ++i) {
    if (i > 0) out += ' ';
    out += std::to_string((*ids)[i]);
  }
  out += '\n';
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace

PDSERVE_COMMAND(tokenize, "print the token ids of a text", RunTokenize);

}  // namespace pdserve::cli
