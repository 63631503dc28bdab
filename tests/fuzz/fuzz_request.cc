// libFuzzer target: the front end's request validation. The input is the
// wire form of a GenerateRequest (as the gRPC front end receives it); it is
// parsed (ParseGenerateRequest) and prepared (PrepareRequest: validation,
// chat template, tools, constraints, tokenization) against the Qwen3
// tokenizer and chat template of ../shared. Every input must give a
// PreparedRequest or a Status, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "server/frontend/request_prep.h"

namespace {

const pdserve::frontend::ModelContext* Model() {
  static const pdserve::frontend::ModelContext* model = [] {
    auto m = pdserve::frontend::LoadModelContext(
        std::string(PDSERVE_SHARED_DIR) + "/tokenizers/qwen3", "qwen3");
    if (!m.ok()) {
      std::fprintf(stderr, "fuzz_request: %s\n",
                   std::string(m.status().message()).c_str());
      return static_cast<pdserve::frontend::ModelContext*>(nullptr);
    }
    (*m)->max_seq_len = 4096;
    return m->release();
  }();
  return model;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto req = pdserve::frontend::ParseGenerateRequest(
      std::string(reinterpret_cast<const char*>(data), size));
  if (!req.ok() || Model() == nullptr) return 0;
  (void)pdserve::frontend::PrepareRequest(*req, *Model());
  return 0;
}
