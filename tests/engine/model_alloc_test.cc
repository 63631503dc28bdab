// ForwardPass::Run and Sampler::Sample do not allocate on the heap in steady
// state: counts every operator new in the process (all threads).
#include <atomic>
#include <cstdlib>
#include <new>
#include <numeric>
#include <vector>

#include "engine/model/forward.h"
#include "engine/model/sampler.h"
#include "gtest/gtest.h"
#include "tests/common/counting_allocator.h"
#include "kernels/thread_pool.h"
#include "tests/engine/model_test_util.h"


namespace pdserve {
namespace {

TEST(ModelAllocTest, ForwardRunDoesNotAllocateInSteadyState) {
  testing_model::TinyShape shape;
  shape.dtype = DType::kQ8_0;  // quantized path: activation scratch
  shape.hidden = 64;
  shape.inter = 64;
  shape.head_dim = 16;
  auto model = testing_model::MakeTinyModel(shape);
  const ModelConfig& c = model->weights.config;
  KvStorage kv(c.num_layers, c.kv_dim(), 4, 64);
  ThreadPool pool(2);
  auto fp = ForwardPass::Create(model->weights, kv, pool, 32);
  ASSERT_TRUE(fp.ok());
  std::vector<int32_t> pages_a(16), pages_b(16);
  std::iota(pages_a.begin(), pages_a.end(), 0);
  std::iota(pages_b.begin(), pages_b.end(), 16);
  std::vector<int32_t> a(40, 5), b(40, 7);
  std::vector<float> logits(32 * c.vocab_size);
  ForwardStats stats;
  auto step = [&](int64_t pos_a, int64_t n_a, int64_t pos_b) {
    SequenceSpan sa{absl::MakeConstSpan(a).subspan(pos_a, n_a), pos_a,
                    pages_a, 0, true};
    SequenceSpan sb{absl::MakeConstSpan(b).subspan(pos_b, 1), pos_b, pages_b,
                    0, false};
    SequenceSpan batch[2] = {sa, sb};
    ASSERT_TRUE((*fp)->Run(batch, absl::MakeSpan(logits), &stats).ok());
  };
  step(0, 20, 0);  // warm-up at the largest size
  const int64_t before = test::AllocationCount();
  step(20, 10, 1);
  for (int i = 0; i < 5; ++i) step(30 + i, 1, 2 + i);
  EXPECT_EQ(test::AllocationCount() - before, 0);
}

TEST(ModelAllocTest, SampleDoesNotAllocateAfterWarmUp) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 50;
  p.top_p = 0.9f;
  p.min_p = 0.01f;
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.2f;
  p.seed = 3;
  auto sampler = Sampler::Create(p, 1000);
  ASSERT_TRUE(sampler.ok());
  std::vector<int32_t> prompt = {1, 2, 3};
  (*sampler)->AddPrompt(prompt);
  std::vector<float> logits(1000);
  for (int i = 0; i < 1000; ++i) logits[i] = std::sin(i * 0.37f) * 4;
  SamplerScratch scratch;
  ASSERT_TRUE((*sampler)->Sample(logits, &scratch).ok());  // warm-up
  const int64_t before = test::AllocationCount();
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE((*sampler)->Sample(logits, &scratch).ok());
  }
  EXPECT_EQ(test::AllocationCount() - before, 0);
}

}  // namespace
}  // namespace pdserve
