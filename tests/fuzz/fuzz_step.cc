// libFuzzer target: the engine's validation of a step's batch
// (ValidateSpans, shared by the CPU forward pass and the device plugins).
// The input is decoded into up to 8 spans: per span a start position
// (int64, any value), up to 64 token ids (int32) and a page table (up to 64
// int32 entries), checked against a small model and pool. Every input must
// give OK or INVALID_ARGUMENT, never a crash or undefined behaviour; an OK
// batch must really fit the limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/model/span_validation.h"

namespace {

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T Take() {
    T v{};
    const size_t n = std::min(sizeof(T), size_ - pos_);
    std::memcpy(&v, data_ + pos_, n);
    pos_ += n;
    return v;
  }
  bool done() const { return pos_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_, pos_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in(data, size);
  pdserve::ModelConfig config;
  config.name = "fuzz";
  config.vocab_size = 512;
  config.max_context = 256;
  pdserve::SpanLimits limits;
  limits.max_positions = 256;
  limits.num_pages = 16;
  limits.page_size = 16;
  limits.max_batch_tokens = 128;
  const int spans = in.Take<uint8_t>() % 9;
  std::vector<std::vector<int32_t>> tokens(spans), tables(spans);
  std::vector<pdserve::SequenceSpan> batch(spans);
  for (int i = 0; i < spans; ++i) {
    batch[i].start_pos = in.Take<int64_t>();
    tokens[i].resize(in.Take<uint8_t>() % 65);
    for (int32_t& t : tokens[i]) t = in.Take<int32_t>();
    tables[i].resize(in.Take<uint8_t>() % 65);
    for (int32_t& p : tables[i]) p = in.Take<int32_t>();
    batch[i].tokens = tokens[i];
    batch[i].page_table = tables[i];
  }
  int64_t pages = 0;
  const absl::Status s = pdserve::ValidateSpans(batch, config, limits, &pages);
  if (s.ok()) {
    int64_t total = 0;
    for (const pdserve::SequenceSpan& span : batch) {
      if (span.start_pos < 0 || span.start_pos + span.size() > 256) std::abort();
      total += span.size();
    }
    if (total > 128 || pages < 0) std::abort();
  } else if (s.code() != absl::StatusCode::kInvalidArgument) {
    std::abort();
  }
  return 0;
}
