// libFuzzer target: safetensors bytes -> SafetensorsModel::FromBuffer and
// every tensor lookup. Any input must give a Status, never a crash.
#include <cstddef>
#include <cstdint>

#include "engine/formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto model = pdserve::SafetensorsModel::FromBuffer("fuzz.safetensors",
                                                     nullptr, data, size);
  if (!model.ok()) return 0;
  for (const auto& [name, tensor] : (*model)->tensors()) {
    (void)(*model)->GetTensor(name);
  }
  return 0;
}
