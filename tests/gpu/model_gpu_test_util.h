// Helpers for the gpu model tests: model loading, a bf16 copy of a model, a
// CPU reference (ForwardPass) and a CUDA runner behind one step function,
// greedy generation over paged KV.
#ifndef PDSERVE_TESTS_GPU_MODEL_GPU_TEST_UTIL_H_
#define PDSERVE_TESTS_GPU_MODEL_GPU_TEST_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/kv/kv_storage.h"
#include "engine/loader/model_loader.h"
#include "engine/model/forward.h"
#include "engine/model_weights.h"
#include "kernels/cuda/plugin/cuda_runner.h"
#include "kernels/dtype.h"
#include "kernels/thread_pool.h"

namespace pdserve::gpu_test {

inline constexpr int64_t kPageSize = 16;

// stories260K (f32, llama2.c; head_dim 8: the runner's fallback attention).
inline std::unique_ptr<ModelWeights> LoadStories() {
  const std::string path =
      std::string(PDSERVE_SHARED_DIR) + "/models/stories260K/stories260K.bin";
  if (access(path.c_str(), R_OK) != 0) return nullptr;
  auto w = LoadModel(path);
  return w.ok() ? std::move(*w) : nullptr;
}

// SmolLM2-135M-Instruct Q4_1 from the pdserve cache (head_dim 64: the kernel
// library's prefill / decode attention), or null.
inline std::unique_ptr<ModelWeights> LoadSmolLm2() {
  const char* cache = std::getenv("PDSERVE_CACHE");
  const char* home = std::getenv("HOME");
  const std::string dir =
      cache != nullptr && *cache != '\0'
          ? std::string(cache)
          : std::string(home != nullptr ? home : ".") + "/.cache/pdserve";
  const std::string path = dir + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (access(path.c_str(), R_OK) != 0) return nullptr;
  auto w = LoadModel(path);
  return w.ok() ? std::move(*w) : nullptr;
}

// A copy of `w` with every weight matrix converted to `to` (F32 or BF16):
// matrices of another type are dequantized (DequantizeRow) and, for BF16,
// rounded to nearest even (QuantizeRow); matrices already of type `to` and
// norm vectors are shared with `w`, which must outlive the copy.
inline std::unique_ptr<ModelWeights> ConvertMatrices(const ModelWeights& w,
                                                     DType to) {
  auto out = std::make_unique<ModelWeights>(w);
  const int64_t elem = to == DType::kF32 ? 4 : 2;
  auto convert = [&](WeightView* v) {
    if (v->empty() || v->type == to) return;
    auto buf = std::make_shared<std::vector<uint8_t>>(v->rows * v->cols * elem);
    std::vector<float> row(v->cols);
    for (int64_t r = 0; r < v->rows; ++r) {
      DequantizeRow(v->type, v->row(r), row.data(), v->cols);
      uint8_t* dst = buf->data() + r * v->cols * elem;
      if (to == DType::kF32) {
        std::memcpy(dst, row.data(), v->cols * 4);
      } else {
        QuantizeRow(to, row.data(), dst, v->cols);
      }
    }
    out->storage.push_back(buf);
    *v = WeightView{to, v->rows, v->cols, v->cols * elem, buf->data()};
  };
  const bool tied = w.lm_head.data == w.token_embedding.data;
  convert(&out->token_embedding);
  if (tied) {
    out->lm_head = out->token_embedding;
  } else {
    convert(&out->lm_head);
  }
  for (LayerWeights& l : out->layers) {
    for (WeightView* v :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      convert(v);
    }
  }
  return out;
}

// A copy of `w` with every f32 matrix rounded to bf16 (round to nearest
// even; norm vectors stay f32).
inline std::unique_ptr<ModelWeights> ToBf16(const ModelWeights& w) {
  return ConvertMatrices(w, DType::kBF16);
}

// One batched step: (batch, logits) -> status.
using StepFn = std::function<absl::Status(absl::Span<const SequenceSpan>,
                                          absl::Span<float>)>;

// The CPU reference: ForwardPass over host KvStorage of `dtype`.
struct CpuRef {
  CpuRef(const ModelWeights& w, int64_t num_pages, int64_t max_tokens,
         KvDType dtype = KvDType::kF32)
      : pool(2),
        kv(w.config.num_kv_layers(), w.config.kv_dim(), kPageSize, num_pages,
           dtype, w.config.head_dim),
        fp(ForwardPass::Create(w, kv, pool, max_tokens).value()) {}
  StepFn fn() {
    return [this](absl::Span<const SequenceSpan> b, absl::Span<float> l) {
      return fp->Run(b, l, nullptr);
    };
  }
  ThreadPool pool;
  KvStorage kv;
  std::unique_ptr<ForwardPass> fp;
};

inline StepFn GpuFn(ForwardBackend* b) {
  return [b](absl::Span<const SequenceSpan> batch, absl::Span<float> l) {
    return b->Run(batch, l, nullptr);
  };
}

inline int32_t Argmax(const float* x, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

// Pages [first, first + n) as a page table.
inline std::vector<int32_t> Pages(int32_t first, int32_t n) {
  std::vector<int32_t> p(n);
  for (int32_t i = 0; i < n; ++i) p[i] = first + i;
  return p;
}

// Greedy generation: the prompt in chunks of `chunk` tokens, then `n` tokens
// decoded one per step. Returns the n tokens (fewer on error, with *status).
inline std::vector<int32_t> Greedy(const StepFn& step, int64_t vocab,
                                   const std::vector<int32_t>& prompt,
                                   int64_t chunk, int n,
                                   const std::vector<int32_t>& pages,
                                   absl::Status* status) {
  std::vector<float> logits(vocab);
  std::vector<int32_t> out;
  int64_t pos = 0;
  for (size_t b = 0; b < prompt.size(); b += chunk) {
    const size_t e = std::min(prompt.size(), b + chunk);
    SequenceSpan s;
    s.tokens = absl::MakeConstSpan(prompt.data() + b, e - b);
    s.start_pos = pos;
    s.page_table = pages;
    *status = step({&s, 1}, absl::MakeSpan(logits));
    if (!status->ok()) return out;
    pos += static_cast<int64_t>(e - b);
  }
  int32_t next = Argmax(logits.data(), vocab);
  for (int i = 0; i < n; ++i) {
    out.push_back(next);
    if (i + 1 == n) break;
    SequenceSpan s;
    s.tokens = absl::MakeConstSpan(&out.back(), 1);
    s.start_pos = pos++;
    s.page_table = pages;
    *status = step({&s, 1}, absl::MakeSpan(logits));
    if (!status->ok()) return out;
    next = Argmax(logits.data(), vocab);
  }
  return out;
}

}  // namespace pdserve::gpu_test

#endif  // PDSERVE_TESTS_GPU_MODEL_GPU_TEST_UTIL_H_
