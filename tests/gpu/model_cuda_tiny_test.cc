// The CUDA runner on random tiny models (tests/engine/model_test_util.h)
// against the CPU forward pass, for paths the stories260K / SmolLM2 tests do
// not reach:
//   - Qwen3 (q/k RMSNorm in the runner's fused prep kernel) with head_dim 64
//     (the kernel library's prefill and decode attention), a decode batch of
//     12 sequences (graph bucket 16: cuBLAS GEMMs inside the captured graph)
//     over several steps, so both input buffers' graphs are replayed;
//   - an LM head in several chunks (vocab 100000: the double-buffered
//     device -> pinned -> host logits copies).
//   - eager decode batches (above the graph bucket limit, graphs off) and
//     quantized weights (Q8_0 / Q4_0: bf16 copies made once at creation,
//     or dequantized per product, for the GEMM; MatVec);
//   - a bf16 KV cache: a 150-token prompt through the tensor-core flash
//     prefill attention, then batched decode steps, against the CPU with a
//     bf16 cache.
// Every test skips without a CUDA device.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/plugin/cuda_runner.h"
#include "kernels/cuda/plugin/runner_internal.h"
#include "tests/engine/model_test_util.h"
#include "tests/gpu/model_gpu_test_util.h"

namespace pdserve::gpu_test {
namespace {

using cuda_runner::CreateCudaRunner;
using cuda_runner::DeviceCount;
using cuda_runner::MakeGeometry;
using cuda_runner::RunnerOptions;
using testing_model::MakeTinyModel;
using testing_model::TinyShape;

#define SKIP_WITHOUT_DEVICE()                                 \
  do {                                                        \
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// Largest |a - b| / (1 + |a|) over n values.
float WorstRelative(const float* a, const float* b, int64_t n) {
  float worst = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(a[i] - b[i]) / (1.0f + std::fabs(a[i])));
  }
  return worst;
}

// A tiny Qwen3 (q/k norm): 2 layers, 4 heads / 2 KV heads of 64, vocab 96.
TinyShape Qwen3Tiny() {
  TinyShape shape;
  shape.arch = Architecture::kQwen3;
  shape.vocab = 96;
  shape.hidden = 64;
  shape.inter = 96;
  shape.layers = 2;
  shape.heads = 4;
  shape.kv_heads = 2;
  shape.head_dim = 64;
  return shape;
}

// Qwen3 tiny model (head_dim 64): 12 sequences prefilled alone, then decoded
// together for 5 steps; every step's logits equal the CPU's.
void ExpectQwen3BatchedDecodeEqualsCpu(const RunnerOptions& options) {
  auto m = MakeTinyModel(Qwen3Tiny());
  const ModelWeights& w = m->weights;
  constexpr int64_t kPages = 64, kMaxTokens = 64, kPagesPerSeq = 4;
  constexpr int kSeqs = 12, kSteps = 5;
  CpuRef cpu(w, kPages, kMaxTokens);
  auto gpu = CreateCudaRunner(w, MakeGeometry(w.config, kPageSize, kPages, 16),
                              kMaxTokens, options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const int64_t vocab = w.config.vocab_size;
  std::vector<std::vector<int32_t>> pages(kSeqs);
  std::vector<int64_t> pos(kSeqs);
  std::vector<int32_t> next(kSeqs);
  // Prefill each sequence alone (prompt of 2 + i tokens, prefill attention).
  for (int i = 0; i < kSeqs; ++i) {
    pages[i] = Pages(i * kPagesPerSeq, kPagesPerSeq);
    std::vector<int32_t> prompt = {1};
    for (int t = 1; t < 2 + i; ++t) prompt.push_back((7 * t + 5 * i) % 90 + 3);
    SequenceSpan s;
    s.tokens = prompt;
    s.page_table = pages[i];
    std::vector<float> want(vocab), got(vocab);
    ASSERT_TRUE(cpu.fp->Run({&s, 1}, absl::MakeSpan(want), nullptr).ok());
    const absl::Status st = (*gpu)->Run({&s, 1}, absl::MakeSpan(got), nullptr);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_LT(WorstRelative(want.data(), got.data(), vocab), 1e-3f) << i;
    pos[i] = static_cast<int64_t>(prompt.size());
    next[i] = Argmax(want.data(), vocab);
  }
  // Decode all sequences together: 12 rows -> graph bucket 16 (GEMM path);
  // step 0 of each input buffer runs eagerly and is captured, later steps
  // replay. Tokens are the CPU's argmax (teacher forcing).
  for (int step = 0; step < kSteps; ++step) {
    std::vector<SequenceSpan> batch(kSeqs);
    for (int i = 0; i < kSeqs; ++i) {
      batch[i].tokens = absl::MakeConstSpan(&next[i], 1);
      batch[i].start_pos = pos[i];
      batch[i].page_table = pages[i];
    }
    std::vector<float> want(kSeqs * vocab), got(kSeqs * vocab);
    ASSERT_TRUE(cpu.fp->Run(batch, absl::MakeSpan(want), nullptr).ok());
    const absl::Status st = (*gpu)->Run(batch, absl::MakeSpan(got), nullptr);
    ASSERT_TRUE(st.ok()) << st;
    for (int i = 0; i < kSeqs; ++i) {
      const float* a = want.data() + i * vocab;
      EXPECT_LT(WorstRelative(a, got.data() + i * vocab, vocab), 1e-3f)
          << "step " << step << " sequence " << i;
      next[i] = Argmax(a, vocab);
      ++pos[i];
    }
  }
}

TEST(CudaTinyModelTest, Qwen3HeadDim64BatchedDecodeGraphsEqualCpu) {
  SKIP_WITHOUT_DEVICE();
  ExpectQwen3BatchedDecodeEqualsCpu(RunnerOptions{});  // cuBLAS in the graph
  RunnerOptions o;
  o.matvec_max_tokens = 16;  // the graph's products as MatVec chunks
  ExpectQwen3BatchedDecodeEqualsCpu(o);
}

TEST(CudaTinyModelTest, Qwen3HeadDim64EagerDecodeEqualsCpu) {
  SKIP_WITHOUT_DEVICE();
  RunnerOptions o;
  o.max_graph_batch = 8;  // 12 sequences: eager decode, GEMM products
  ExpectQwen3BatchedDecodeEqualsCpu(o);
  o.use_graphs = false;
  o.max_graph_batch = 256;
  ExpectQwen3BatchedDecodeEqualsCpu(o);
}

// Quantized weights (Q8_0, Q4_0) on a 48-token prompt with all logits, in
// spans of 40 (products of more than 32 rows: bf16 GEMM, activations rounded
// to bf16), 1 and 7 rows (quantized MatVec, f32 activations), against the
// double-precision reference on the dequantized weights (ReferenceLogits).
// The random tiny model amplifies rounding (the CPU, which quantizes
// activations to 8 bits, is off by up to ~0.2 here), so the GPU must be
// within 0.1 relative, no worse than the CPU, and agree on the argmax of
// nearly every row. The GEMM's bf16 weights come from copies converted once
// at creation (kBf16: no dequantization in any step) or from a per-product
// dequantization (kPerStep): the same values, so the same logits bit for bit.
std::vector<float> QuantizedLogits(const ModelWeights& w,
                                   RunnerOptions::QuantizedGemm mode,
                                   const std::vector<int32_t>& prompt,
                                   int64_t begin, int64_t end,
                                   int64_t* per_step_dequantizations) {
  constexpr int64_t kPages = 16, kMaxTokens = 64;
  RunnerOptions o;
  o.quantized_gemm = mode;
  auto gpu = CreateCudaRunner(w, MakeGeometry(w.config, kPageSize, kPages, 4),
                              kMaxTokens, o);
  EXPECT_TRUE(gpu.ok()) << gpu.status();
  if (!gpu.ok()) return {};
  const std::vector<int32_t> pages = Pages(0, 4);
  std::vector<float> logits;
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 40}, {40, 41}, {41, 48}}) {
    SequenceSpan s;
    s.tokens = absl::MakeConstSpan(prompt.data() + b, e - b);
    s.start_pos = b;
    s.page_table = pages;
    s.all_logits = true;
    std::vector<float> got((e - b) * w.config.vocab_size);
    const absl::Status st = (*gpu)->Run({&s, 1}, absl::MakeSpan(got), nullptr);
    EXPECT_TRUE(st.ok()) << st;
    if (b == begin && e == end) logits = got;
  }
  const auto* runner = dynamic_cast<cuda_runner::CudaRunner*>(gpu->get());
  EXPECT_NE(runner, nullptr);
  *per_step_dequantizations = runner->per_step_dequantizations();
  EXPECT_THAT((*gpu)->Describe(),
              ::testing::HasSubstr(mode == RunnerOptions::QuantizedGemm::kBf16
                                       ? "quantized GEMM weights as bf16"
                                       : "dequantized per step"));
  return logits;
}

TEST(CudaTinyModelTest, QuantizedWeightsTrackReference) {
  SKIP_WITHOUT_DEVICE();
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    TinyShape shape;
    shape.vocab = 128;
    shape.hidden = 64;
    shape.inter = 128;
    shape.dtype = type;
    auto m = MakeTinyModel(shape);
    const ModelWeights& w = m->weights;
    constexpr int64_t kRows = 48;
    CpuRef cpu(w, 16, 64);
    std::vector<int32_t> prompt(kRows);
    for (int64_t t = 0; t < kRows; ++t) {
      prompt[t] = static_cast<int32_t>((t * 37) % 125 + 3);
    }
    const std::vector<float> ref = testing_model::ReferenceLogits(*m, prompt);
    const std::vector<int32_t> pages = Pages(0, 4);
    const int64_t vocab = shape.vocab;
    for (auto [begin, end] :
         {std::pair<int64_t, int64_t>{0, 40}, {40, 41}, {41, 48}}) {
      SequenceSpan s;
      s.tokens = absl::MakeConstSpan(prompt.data() + begin, end - begin);
      s.start_pos = begin;
      s.page_table = pages;
      s.all_logits = true;
      std::vector<float> cpu_l((end - begin) * vocab);
      ASSERT_TRUE(cpu.fp->Run({&s, 1}, absl::MakeSpan(cpu_l), nullptr).ok());
      int64_t converted_dequant = -1, per_step_dequant = -1;
      const std::vector<float> got =
          QuantizedLogits(w, RunnerOptions::QuantizedGemm::kBf16, prompt, begin,
                          end, &converted_dequant);
      const std::vector<float> per_step =
          QuantizedLogits(w, RunnerOptions::QuantizedGemm::kPerStep, prompt,
                          begin, end, &per_step_dequant);
      ASSERT_EQ(got.size(), cpu_l.size());
      EXPECT_EQ(got, per_step) << DTypeName(type) << " span at " << begin;
      EXPECT_EQ(converted_dequant, 0) << DTypeName(type);
      EXPECT_GT(per_step_dequant, 0) << DTypeName(type);
      float worst_gpu = 0.0f, worst_cpu = 0.0f;
      int same_top = 0;
      for (int64_t r = 0; r < end - begin; ++r) {
        const float* want = ref.data() + (begin + r) * vocab;
        const float* g = got.data() + r * vocab;
        worst_gpu = std::max(worst_gpu, WorstRelative(want, g, vocab));
        worst_cpu = std::max(
            worst_cpu, WorstRelative(want, cpu_l.data() + r * vocab, vocab));
        same_top += Argmax(want, vocab) == Argmax(g, vocab);
      }
      EXPECT_LT(worst_gpu, 0.1f) << DTypeName(type) << " span at " << begin;
      EXPECT_LE(worst_gpu, worst_cpu) << DTypeName(type) << " at " << begin;
      EXPECT_GE(same_top, (end - begin) * 9 / 10) << DTypeName(type);
    }
  }
}

// A bf16 KV cache on both sides: a 150-token Qwen3 prompt (head_dim 64, GQA
// 2) in one step takes the tensor-core flash prefill attention (bf16
// queries and probabilities: close to the CPU, same top-1 on nearly every
// row), then 4 sequences decode 3 steps together (the decode kernel reading
// the bf16 cache). Keys computed in f32 that differ in their last bits
// (device vs CPU products) can round to neighbouring bf16 values, which on
// this random model moves logits by up to ~1e-2 even without the flash
// step, so every comparison has the prompt's bound.
TEST(CudaTinyModelTest, Bf16KvFlashPrefillThenDecodeTrackCpu) {
  SKIP_WITHOUT_DEVICE();
  auto m = MakeTinyModel(Qwen3Tiny());
  const ModelWeights& w = m->weights;
  constexpr int64_t kPages = 64, kMaxTokens = 160, kLong = 150;
  CpuRef cpu(w, kPages, kMaxTokens, KvDType::kBF16);
  auto gpu = CreateCudaRunner(
      w, MakeGeometry(w.config, kPageSize, kPages, 8, KvDType::kBF16),
      kMaxTokens, RunnerOptions{});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const int64_t vocab = w.config.vocab_size;
  std::vector<int32_t> prompt(kLong);
  for (int64_t t = 0; t < kLong; ++t) {
    prompt[t] = static_cast<int32_t>((t * 29 + 7) % 90 + 3);
  }
  const std::vector<int32_t> long_pages = Pages(0, 10);
  SequenceSpan s;
  s.tokens = prompt;
  s.page_table = long_pages;
  s.all_logits = true;
  std::vector<float> want(kLong * vocab), got(kLong * vocab);
  ASSERT_TRUE(cpu.fp->Run({&s, 1}, absl::MakeSpan(want), nullptr).ok());
  absl::Status st = (*gpu)->Run({&s, 1}, absl::MakeSpan(got), nullptr);
  ASSERT_TRUE(st.ok()) << st;
  int same_top = 0;
  float worst = 0.0f;
  for (int64_t r = 0; r < kLong; ++r) {
    worst = std::max(worst, WorstRelative(want.data() + r * vocab,
                                          got.data() + r * vocab, vocab));
    same_top += Argmax(want.data() + r * vocab, vocab) ==
                Argmax(got.data() + r * vocab, vocab);
  }
  EXPECT_LT(worst, 3e-2f);
  EXPECT_GE(same_top, kLong * 9 / 10);
  // Decode: the long sequence and three short ones, 3 steps.
  std::vector<std::vector<int32_t>> pages = {long_pages, Pages(10, 2),
                                             Pages(12, 2), Pages(14, 2)};
  std::vector<int64_t> pos = {kLong, 0, 0, 0};
  std::vector<int32_t> next = {Argmax(want.data() + (kLong - 1) * vocab, vocab),
                               1, 5, 9};
  for (int step = 0; step < 3; ++step) {
    std::vector<SequenceSpan> batch(4);
    for (int i = 0; i < 4; ++i) {
      batch[i].tokens = absl::MakeConstSpan(&next[i], 1);
      batch[i].start_pos = pos[i];
      batch[i].page_table = pages[i];
    }
    std::vector<float> a(4 * vocab), b(4 * vocab);
    ASSERT_TRUE(cpu.fp->Run(batch, absl::MakeSpan(a), nullptr).ok());
    st = (*gpu)->Run(batch, absl::MakeSpan(b), nullptr);
    ASSERT_TRUE(st.ok()) << st;
    for (int i = 0; i < 4; ++i) {
      EXPECT_LT(
          WorstRelative(a.data() + i * vocab, b.data() + i * vocab, vocab),
          3e-2f)
          << "step " << step << " sequence " << i;
      next[i] = Argmax(a.data() + i * vocab, vocab);
      ++pos[i];
    }
  }
}

// RunnerOptions::step_timing: one (busy, gap) pair per step, graph and
// eager, sampled or not; the first gap after a take is 0; a take empties
// the record; without the option nothing is recorded.
TEST(CudaTinyModelTest, StepTimingsCoverEveryStep) {
  SKIP_WITHOUT_DEVICE();
  TinyShape shape;
  auto m = MakeTinyModel(shape);
  const ModelWeights& w = m->weights;
  for (bool timing : {true, false}) {
    RunnerOptions o;
    o.step_timing = timing;
    auto gpu =
        CreateCudaRunner(w, MakeGeometry(w.config, kPageSize, 8, 4), 32, o);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    auto* runner = dynamic_cast<cuda_runner::CudaRunner*>(gpu->get());
    ASSERT_NE(runner, nullptr);
    const std::vector<int32_t> prompt = {1, 5, 9, 14, 3};
    const std::vector<int32_t> pages = Pages(0, 2);
    SequenceSpan s;
    s.tokens = prompt;
    s.page_table = pages;
    std::vector<float> logits(w.config.vocab_size);
    ASSERT_TRUE((*gpu)->Run({&s, 1}, absl::MakeSpan(logits), nullptr).ok());
    int32_t token = 7;
    DeviceSamplingParams p;
    SampledToken out;
    for (int i = 0; i < 4; ++i) {  // eager, then captured, then replays
      s.tokens = absl::MakeConstSpan(&token, 1);
      s.start_pos = static_cast<int64_t>(prompt.size()) + i;
      ASSERT_TRUE(
          (*gpu)->RunAndSample({&s, 1}, {&p, 1}, {&out, 1}, nullptr).ok());
    }
    auto t = runner->TakeStepTimings();
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->size(), timing ? 5u : 0u);
    for (size_t i = 0; i < t->size(); ++i) {
      EXPECT_GE((*t)[i].busy_ms, 0.0) << i;
      EXPECT_GE((*t)[i].gap_ms, 0.0) << i;
    }
    if (timing) {
      EXPECT_EQ((*t)[0].gap_ms, 0.0);
    }
    auto again = runner->TakeStepTimings();
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(again->empty());
  }
}

TEST(CudaTinyModelTest, LmHeadInSeveralChunksEqualsCpu) {
  SKIP_WITHOUT_DEVICE();
  TinyShape shape;
  shape.vocab = 100000;  // 64 MiB of logits rows per chunk: 167 rows
  shape.hidden = 32;
  shape.inter = 64;
  shape.layers = 1;
  auto m = MakeTinyModel(shape);
  const ModelWeights& w = m->weights;
  constexpr int64_t kPages = 32, kMaxTokens = 512, kRows = 400;
  CpuRef cpu(w, kPages, kMaxTokens);
  RunnerOptions o;
  o.max_graph_batch = 16;  // else the chunk is at least the graph bucket
  o.flash_attention_min_rows = 0;  // f32 attention: compare at 1e-3
  auto gpu = CreateCudaRunner(w, MakeGeometry(w.config, kPageSize, kPages, 4),
                              kMaxTokens, o);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::vector<int32_t> prompt(kRows);
  for (int64_t t = 0; t < kRows; ++t) {
    prompt[t] = static_cast<int32_t>((t * 7919) % (shape.vocab - 3) + 3);
  }
  const std::vector<int32_t> pages = Pages(0, 25);
  SequenceSpan s;
  s.tokens = prompt;
  s.page_table = pages;
  s.all_logits = true;
  const int64_t vocab = shape.vocab;
  std::vector<float> want(kRows * vocab), got(kRows * vocab, -1.0f);
  ASSERT_TRUE(cpu.fp->Run({&s, 1}, absl::MakeSpan(want), nullptr).ok());
  const absl::Status st = (*gpu)->Run({&s, 1}, absl::MakeSpan(got), nullptr);
  ASSERT_TRUE(st.ok()) << st;
  for (int64_t r = 0; r < kRows; r += 1) {
    ASSERT_LT(
        WorstRelative(want.data() + r * vocab, got.data() + r * vocab, vocab),
        1e-3f)
        << "row " << r;
  }
}

}  // namespace
}  // namespace pdserve::gpu_test
