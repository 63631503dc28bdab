// The CUDA runner (kernels/cuda/plugin) against the CPU forward pass, whole
// model. Each test states the model and path it covers:
//   - stories260K f32 (fp32 path: f32 MatVec, cuBLAS f32 GEMM, the runner's
//     any-head_dim fallback attention, decode graphs) and bf16 (the runner's
//     f32 -> bf16 upload vs the CPU on the same bf16 weights);
//   - stories260K with a bf16 KV cache on both sides (the runner's fused
//     store rounds as the CPU's bf16 storage does);
//   - the tensor-core flash prefill attention (head_dim 8, zero-padded)
//     forced onto short prompts, f32 and bf16 caches;
//   - SmolLM2-135M Q4_1 (quantized MatVec, the kernel library's prefill and
//     decode attention), when cached;
//   - batched steps equal to running each sequence alone.
// Every test needing a device skips without one (CPU-only CI).
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/plugin/cuda_runner.h"
#include "tests/gpu/model_gpu_test_util.h"

namespace pdserve::gpu_test {
namespace {

using cuda_runner::CreateCudaRunner;
using cuda_runner::DeviceCount;
using cuda_runner::MakeGeometry;
using cuda_runner::RunnerOptions;

constexpr int64_t kPages = 64;  // 1024 positions
constexpr int64_t kMaxTokens = 128;
constexpr int kGenerate = 64;

#define SKIP_WITHOUT_DEVICE()                                 \
  do {                                                        \
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

std::unique_ptr<ForwardBackend> MakeRunner(const ModelWeights& w,
                                           const RunnerOptions& o,
                                           int64_t pages = kPages,
                                           KvDType kv = KvDType::kF32) {
  auto r = CreateCudaRunner(w, MakeGeometry(w.config, kPageSize, pages, 8, kv),
                            kMaxTokens, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(*r) : nullptr;
}

std::vector<int32_t> Prompt(int64_t n, int64_t vocab, int32_t seed) {
  std::vector<int32_t> p = {1};  // BOS
  uint32_t x = 2463534242u + seed;
  while (static_cast<int64_t>(p.size()) < n) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p.push_back(static_cast<int32_t>(3 + x % (vocab - 3)));
  }
  return p;
}

// Greedy over kGenerate tokens: the GPU equals the CPU (prompt in one span
// of `chunk` tokens or fewer), both storing keys and values as `kv`.
void ExpectGreedyEqual(const ModelWeights& cpu_w, const ModelWeights& gpu_w,
                       const RunnerOptions& o, int64_t prompt_len,
                       int64_t chunk, KvDType kv = KvDType::kF32) {
  CpuRef cpu(cpu_w, kPages, kMaxTokens, kv);
  std::unique_ptr<ForwardBackend> gpu = MakeRunner(gpu_w, o, kPages, kv);
  ASSERT_NE(gpu, nullptr);
  const int64_t vocab = cpu_w.config.vocab_size;
  const std::vector<int32_t> prompt = Prompt(prompt_len, vocab, 7);
  absl::Status st;
  const std::vector<int32_t> want =
      Greedy(cpu.fn(), vocab, prompt, chunk, kGenerate, Pages(0, 8), &st);
  ASSERT_TRUE(st.ok()) << st;
  const std::vector<int32_t> got = Greedy(GpuFn(gpu.get()), vocab, prompt,
                                          chunk, kGenerate, Pages(8, 8), &st);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(got, want);
  // Device sampling (greedy) picks the same tokens without host logits.
  std::vector<int32_t> sampled;
  {
    std::vector<float> logits(vocab);
    SequenceSpan s;
    s.tokens = prompt;
    const std::vector<int32_t> pages = Pages(16, 8);  // outlives the span
    s.page_table = pages;
    DeviceSamplingParams p;  // temperature 0: greedy
    SampledToken t;
    ASSERT_LE(static_cast<int64_t>(prompt.size()), kMaxTokens);
    st = gpu->RunAndSample({&s, 1}, {&p, 1}, {&t, 1}, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    int64_t pos = static_cast<int64_t>(prompt.size());
    for (int i = 0; i < kGenerate; ++i) {
      sampled.push_back(t.token);
      EXPECT_LE(t.logprob, 0.0f);
      if (i + 1 == kGenerate) break;
      s.tokens = absl::MakeConstSpan(&sampled.back(), 1);
      s.start_pos = pos++;
      st = gpu->RunAndSample({&s, 1}, {&p, 1}, {&t, 1}, nullptr);
      ASSERT_TRUE(st.ok()) << st;
    }
  }
  EXPECT_EQ(sampled, want);
}

TEST(CudaModelTest, Stories260KFp32GreedyEqualsCpu) {
  SKIP_WITHOUT_DEVICE();
  auto w = LoadStories();
  if (w == nullptr) GTEST_SKIP() << "stories260K not available";
  RunnerOptions o;
  ExpectGreedyEqual(*w, *w, o, 6, 8);  // MatVec throughout, decode graphs
  o.use_graphs = false;
  ExpectGreedyEqual(*w, *w, o, 6, 8);  // eager decode
}

TEST(CudaModelTest, Stories260KFp32LongPromptGemmEqualsCpu) {
  SKIP_WITHOUT_DEVICE();
  auto w = LoadStories();
  if (w == nullptr) GTEST_SKIP() << "stories260K not available";
  // A 40-token prompt in one span: cuBLAS f32 GEMM (no TF32).
  ExpectGreedyEqual(*w, *w, RunnerOptions{}, 40, 40);
}

TEST(CudaModelTest, Stories260KBf16KvGreedyEqualsCpuBf16Kv) {
  SKIP_WITHOUT_DEVICE();
  auto w = LoadStories();
  if (w == nullptr) GTEST_SKIP() << "stories260K not available";
  RunnerOptions o;
  ExpectGreedyEqual(*w, *w, o, 6, 8, KvDType::kBF16);    // decode graphs
  ExpectGreedyEqual(*w, *w, o, 40, 40, KvDType::kBF16);  // one 40-row span
  o.use_graphs = false;
  ExpectGreedyEqual(*w, *w, o, 6, 8, KvDType::kBF16);  // eager decode
}

TEST(CudaModelTest, Stories260KBf16GreedyEqualsCpuOnBf16Weights) {
  SKIP_WITHOUT_DEVICE();
  auto w = LoadStories();
  if (w == nullptr) GTEST_SKIP() << "stories260K not available";
  std::unique_ptr<ModelWeights> bf16 = ToBf16(*w);
  RunnerOptions o;
  o.f32_to_bf16 = true;  // the runner converts the f32 model on upload
  ExpectGreedyEqual(*bf16, *w, o, 6, 8);
  ExpectGreedyEqual(*bf16, *bf16, RunnerOptions{}, 6, 8);  // stored bf16
}

TEST(CudaModelTest, AllLogitsRowsMatchCpu) {
  SKIP_WITHOUT_DEVICE();
  auto w = LoadStories();
  if (w == nullptr) GTEST_SKIP() << "stories260K not available";
  CpuRef cpu(*w, kPages, kMaxTokens);
  std::unique_ptr<ForwardBackend> gpu = MakeRunner(*w, RunnerOptions{});
  ASSERT_NE(gpu, nullptr);
  const int64_t vocab = w->config.vocab_size;
  const std::vector<int32_t> prompt = Prompt(100, vocab, 3);  // 7 pages
  SequenceSpan s;
  s.tokens = prompt;
  const std::vector<int32_t> pages = Pages(0, 8);  // outlives the span
  s.page_table = pages;
  s.all_logits = true;
  std::vector<float> want(prompt.size() * vocab), got(want.size());
  ASSERT_TRUE(cpu.fp->Run({&s, 1}, absl::MakeSpan(want)).ok());
  ForwardStats stats;
  ASSERT_TRUE(gpu->Run({&s, 1}, absl::MakeSpan(got), &stats).ok());
  float worst = 0.0f;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst,
                     std::fabs(want[i] - got[i]) / (1.0f + std::fabs(want[i])));
  }
  EXPECT_LT(worst, 1e-3f);
  EXPECT_EQ(stats.steps, 1);
  EXPECT_EQ(stats.tokens, 100);
  EXPECT_EQ(stats.logit_rows, 100);
  EXPECT_GT(stats.flops, 0);
  EXPECT_EQ(stats.kv_bytes_written,
            100 * w->config.num_layers * 2 * w->config.kv_dim() * 4);
}

// The tensor-core flash prefill attention (bf16 queries, keys, values and
// probabilities; stories260K's head_dim 8 zero-padded to 64), forced onto a
// 100-token stories260K prompt (all logits) and a 30-token chunk continuing
// it (start_pos > 0), with an f32 and a bf16 cache: close to the CPU and
// the same top-1 on nearly all rows. The bound is loose: bf16 keeps 8
// significant bits (TF32, which the cuBLAS attention this replaced used,
// 11 and passed 3e-2), and this tiny model amplifies rounding through its
// layers (0.04-0.11 seen on the CPU emulator).
void ExpectFlashAttentionTracksCpu(KvDType kv) {
  auto w = LoadStories();
  if (w == nullptr) GTEST_SKIP() << "stories260K not available";
  CpuRef cpu(*w, kPages, kMaxTokens, kv);
  RunnerOptions o;
  o.flash_attention_min_rows = 16;
  std::unique_ptr<ForwardBackend> gpu = MakeRunner(*w, o, kPages, kv);
  ASSERT_NE(gpu, nullptr);
  const int64_t vocab = w->config.vocab_size;
  const std::vector<int32_t> prompt = Prompt(130, vocab, 5);
  const std::vector<int32_t> pages = Pages(0, 9);  // outlives the spans
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 100}, {100, 130}}) {
    SequenceSpan s;
    s.tokens = absl::MakeConstSpan(prompt.data() + begin, end - begin);
    s.start_pos = begin;
    s.page_table = pages;
    s.all_logits = true;
    std::vector<float> want((end - begin) * vocab), got(want.size());
    ASSERT_TRUE(cpu.fp->Run({&s, 1}, absl::MakeSpan(want)).ok());
    ASSERT_TRUE(gpu->Run({&s, 1}, absl::MakeSpan(got), nullptr).ok());
    float worst = 0.0f;
    int same_top = 0;
    for (int64_t r = 0; r < end - begin; ++r) {
      const float* a = want.data() + r * vocab;
      const float* b = got.data() + r * vocab;
      for (int64_t v = 0; v < vocab; ++v) {
        worst =
            std::max(worst, std::fabs(a[v] - b[v]) / (1.0f + std::fabs(a[v])));
      }
      same_top += Argmax(a, vocab) == Argmax(b, vocab);
    }
    EXPECT_LT(worst, 0.15f) << "span [" << begin << ", " << end << ")";
    EXPECT_GE(same_top, (end - begin) * 9 / 10);
  }
}

TEST(CudaModelTest, FlashAttentionTracksCpu) {
  SKIP_WITHOUT_DEVICE();
  ExpectFlashAttentionTracksCpu(KvDType::kF32);
  ExpectFlashAttentionTracksCpu(KvDType::kBF16);
}

// Several sequences at different positions in one step (decode rows padded
// into a graph bucket, then decode rows mixed with a prefill chunk) give the
// logits each gets alone.
TEST(CudaModelTest, BatchedStepEqualsAlone) {
  SKIP_WITHOUT_DEVICE();
  auto w = LoadStories();
  if (w == nullptr) GTEST_SKIP() << "stories260K not available";
  std::unique_ptr<ForwardBackend> gpu = MakeRunner(*w, RunnerOptions{}, 96);
  ASSERT_NE(gpu, nullptr);
  const int64_t vocab = w->config.vocab_size;
  constexpr int kSeqs = 5;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kSeqs; ++i)
    prompts.push_back(Prompt(3 + 9 * i, vocab, i));
  // Alone: each sequence on its own pages [i * 8, i * 8 + 8): prompt minus
  // its last token, then the last token alone -> reference logits.
  // Batched: the same on pages 40.., all last tokens in one step.
  auto prefill = [&](int i, int32_t page0, std::vector<float>* last) {
    const std::vector<int32_t>& p = prompts[i];
    const std::vector<int32_t> pages = Pages(page0, 8);
    SequenceSpan s;
    s.tokens = absl::MakeConstSpan(p.data(), p.size() - 1);
    s.page_table = pages;
    std::vector<float> l(vocab);
    ASSERT_TRUE(gpu->Run({&s, 1}, absl::MakeSpan(l), nullptr).ok());
    if (last == nullptr) return;
    s.tokens = absl::MakeConstSpan(&p.back(), 1);
    s.start_pos = static_cast<int64_t>(p.size()) - 1;
    last->resize(vocab);
    ASSERT_TRUE(gpu->Run({&s, 1}, absl::MakeSpan(*last), nullptr).ok());
  };
  std::vector<std::vector<float>> alone(kSeqs);
  for (int i = 0; i < kSeqs; ++i) prefill(i, i * 8, &alone[i]);
  auto expect_close = [&](const float* got, const std::vector<float>& want,
                          int i) {
    float worst = 0.0f;
    for (int64_t v = 0; v < vocab; ++v) {
      worst = std::max(worst, std::fabs(got[v] - want[v]));
    }
    EXPECT_LT(worst, 1e-4f) << "sequence " << i;
    EXPECT_EQ(Argmax(got, vocab), Argmax(want.data(), vocab)) << i;
  };
  // (a) decode only: sequences 0..2 (3 rows -> bucket 4, one padded row).
  {
    std::vector<std::vector<int32_t>> pages;
    for (int i = 0; i < 3; ++i) {
      prefill(i, 40 + i * 8, nullptr);
      pages.push_back(Pages(40 + i * 8, 8));
    }
    std::vector<SequenceSpan> batch(3);
    for (int i = 0; i < 3; ++i) {
      batch[i].tokens = absl::MakeConstSpan(&prompts[i].back(), 1);
      batch[i].start_pos = static_cast<int64_t>(prompts[i].size()) - 1;
      batch[i].page_table = pages[i];
    }
    std::vector<float> got(3 * vocab);
    for (int rep = 0; rep < 3; ++rep) {  // eager + capture, then replays
      ASSERT_TRUE(gpu->Run(batch, absl::MakeSpan(got), nullptr).ok());
      for (int i = 0; i < 3; ++i)
        expect_close(got.data() + i * vocab, alone[i], i);
    }
  }
  // (b) mixed: sequences 3 and 4 decode their last token while sequence 0
  // prefills its whole prompt (all logits) on fresh pages 80..87.
  {
    std::vector<std::vector<int32_t>> pages = {
        Pages(40 + 3 * 8, 8), Pages(80, 8), Pages(40 + 4 * 8, 8)};
    for (int i = 3; i < 5; ++i) prefill(i, 40 + i * 8, nullptr);
    std::vector<SequenceSpan> batch(3);
    batch[0].tokens = absl::MakeConstSpan(&prompts[3].back(), 1);
    batch[0].start_pos = static_cast<int64_t>(prompts[3].size()) - 1;
    batch[0].page_table = pages[0];
    batch[1].tokens = prompts[0];
    batch[1].all_logits = true;
    batch[1].page_table = pages[1];
    batch[2].tokens = absl::MakeConstSpan(&prompts[4].back(), 1);
    batch[2].start_pos = static_cast<int64_t>(prompts[4].size()) - 1;
    batch[2].page_table = pages[2];
    const int64_t rows = 1 + static_cast<int64_t>(prompts[0].size()) + 1;
    std::vector<float> got(rows * vocab);
    ASSERT_TRUE(gpu->Run(batch, absl::MakeSpan(got), nullptr).ok());
    expect_close(got.data(), alone[3], 3);
    expect_close(got.data() + (rows - 2) * vocab, alone[0], 0);
    expect_close(got.data() + (rows - 1) * vocab, alone[4], 4);
  }
}

// SmolLM2 on the exact paths: the Q4_1 file's weights dequantized to f32
// (cuBLAS f32 GEMM without TF32, f32 MatVec) and rounded to bf16 (the CPU
// runs the same bf16 weights): greedy over 64 tokens equals the CPU's, with
// a 24-token prompt in one span (GEMM prefill) and decode graphs.
TEST(CudaModelTest, SmolLm2Fp32AndBf16GreedyEqualsCpu) {
  SKIP_WITHOUT_DEVICE();
  auto q = LoadSmolLm2();
  if (q == nullptr) GTEST_SKIP() << "SmolLM2 Q4_1 not in the cache";
  std::unique_ptr<ModelWeights> f32 = ConvertMatrices(*q, DType::kF32);
  ExpectGreedyEqual(*f32, *f32, RunnerOptions{}, 24, 24);
  std::unique_ptr<ModelWeights> bf16 = ConvertMatrices(*q, DType::kBF16);
  ExpectGreedyEqual(*bf16, *bf16, RunnerOptions{}, 24, 24);
}

TEST(CudaModelTest, SmolLm2Q4_1GreedyTracksCpu) {
  SKIP_WITHOUT_DEVICE();
  auto w = LoadSmolLm2();
  if (w == nullptr) GTEST_SKIP() << "SmolLM2 Q4_1 not in the cache";
  // The CPU quantizes activations to 8 bits for Q4_1 products, the GPU does
  // not; so instead of exact equality, the GPU's greedy token must be the
  // CPU's argmax or within 0.25 logits of it, with the CPU fed the GPU's
  // tokens (teacher forcing), over 64 tokens.
  CpuRef cpu(*w, kPages, kMaxTokens);
  std::unique_ptr<ForwardBackend> gpu = MakeRunner(*w, RunnerOptions{});
  ASSERT_NE(gpu, nullptr);
  const int64_t vocab = w->config.vocab_size;
  const std::vector<int32_t> prompt = Prompt(24, vocab, 11);  // GEMM prefill
  absl::Status st;
  const std::vector<int32_t> got =
      Greedy(GpuFn(gpu.get()), vocab, prompt, 24, kGenerate, Pages(8, 8), &st);
  ASSERT_TRUE(st.ok()) << st;
  std::vector<float> logits(vocab);
  const std::vector<int32_t> pages = Pages(0, 8);  // outlives the span
  SequenceSpan s;
  s.tokens = prompt;
  s.page_table = pages;
  ASSERT_TRUE(cpu.fp->Run({&s, 1}, absl::MakeSpan(logits)).ok());
  int64_t pos = static_cast<int64_t>(prompt.size());
  int exact = 0;
  for (int i = 0; i < kGenerate; ++i) {
    const int32_t best = Argmax(logits.data(), vocab);
    exact += best == got[i];
    EXPECT_LE(logits[best] - logits[got[i]], 0.25f) << "token " << i;
    s.tokens = absl::MakeConstSpan(&got[i], 1);
    s.start_pos = pos++;
    ASSERT_TRUE(cpu.fp->Run({&s, 1}, absl::MakeSpan(logits)).ok());
  }
  EXPECT_GE(exact, kGenerate - 4);
}

}  // namespace
}  // namespace pdserve::gpu_test
