// libFuzzer target: the llama2.c formats: a checkpoint header
// (ParseLlama2cHeader) and a tokenizer.bin (VocabFromLlama2c, then a
// tokenizer built from it encodes and decodes a fixed text). Any input must
// give a Status, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/formats/llama2c.h"
#include "server/tokenizer/loaders.h"
#include "server/tokenizer/tokenizer.h"
#include "server/tokenizer/vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)pdserve::ParseLlama2cHeader("fuzz.bin", data, size);
  auto vocab = pdserve::VocabFromLlama2c(
      std::string_view(reinterpret_cast<const char*>(data), size));
  if (!vocab.ok()) return 0;
  auto tok = pdserve::BuildTokenizer(*std::move(vocab));
  if (!tok.ok()) return 0;
  auto ids = (*tok)->Encode("Once upon a time, a little dog ran. \xc3\xa9\xe2\x96\x81");
  if (ids.ok()) (void)(*tok)->Decode(*ids);
  return 0;
}
