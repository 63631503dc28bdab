// libFuzzer target: GGUF bytes -> GgufFile::FromBuffer, then everything that
// reads the parsed file: typed metadata accessors, the tensor index, the
// tokenizer's vocabulary loader and the model-config reader. Any input must
// give a Status, never a crash, a hang or undefined behaviour.
#include <cstddef>
#include <cstdint>

#include "engine/formats/gguf.h"
#include "engine/loader/model_config_io.h"
#include "server/tokenizer/loaders.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = pdserve::GgufFile::FromBuffer("fuzz.gguf", nullptr, data, size);
  if (!file.ok()) return 0;
  const pdserve::GgufFile& f = **file;
  for (const auto& [key, value] : f.metadata()) {
    (void)f.GetInt(key);
    (void)f.GetFloat(key);
    (void)f.GetString(key);
    (void)f.GetBool(key);
    (void)f.GetStringArray(key);
    (void)f.GetIntArray(key);
    (void)f.GetFloatArray(key);
  }
  for (const pdserve::GgufTensorInfo& t : f.tensors()) (void)f.GetTensor(t.name);
  (void)pdserve::VocabFromGguf(f);
  (void)pdserve::ConfigFromGguf(f);
  return 0;
}
