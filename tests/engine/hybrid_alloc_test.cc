// ForwardPass::Run on the MoE and hybrid fixtures does not allocate on the
// heap in steady state (prefill chunks and decode steps of two sequences):
// counts every operator new in the process (all threads).
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "engine/loader/model_loader.h"
#include "gtest/gtest.h"
#include "tests/common/counting_allocator.h"
#include "tests/engine/hybrid_test_util.h"


namespace pdserve {
namespace {

void CheckNoAllocation(const std::string& name) {
  auto w = LoadModel(hybrid_test::kHybridDir + "/" + name);
  ASSERT_TRUE(w.ok()) << w.status();
  const ModelWeights& m = **w;
  KvStorage kv(m.config.num_kv_layers(), m.config.kv_dim(), 16, 8);
  ThreadPool pool(2);
  auto fp = ForwardPass::Create(m, kv, pool, 32);
  ASSERT_TRUE(fp.ok()) << fp.status();
  std::vector<float> state_a(m.config.linear_state_floats());
  std::vector<float> state_b(m.config.linear_state_floats());
  const std::vector<int32_t> pages_a = {0, 1, 2, 3}, pages_b = {4, 5, 6, 7};
  const std::vector<int32_t> prompt = {1, 5, 9, 13, 17, 21, 25, 29, 33, 37};
  std::vector<int32_t> next = {3, 4};
  std::vector<float> logits(2 * m.config.vocab_size);
  SequenceSpan spans[2];
  auto step = [&](int64_t pos, bool prefill) {
    for (int s = 0; s < 2; ++s) {
      spans[s].tokens = prefill ? absl::MakeConstSpan(prompt)
                                : absl::MakeConstSpan(&next[s], 1);
      spans[s].start_pos = pos;
      spans[s].page_table = s == 0 ? pages_a : pages_b;
      spans[s].linear_state = state_a.empty() ? nullptr
                              : s == 0        ? state_a.data()
                                              : state_b.data();
    }
    ASSERT_TRUE((*fp)->Run(spans, absl::MakeSpan(logits)).ok());
  };
  step(0, true);
  step(10, false);  // warm-up: per-thread MatMul scratch
  const int64_t before = test::AllocationCount();
  step(0, true);
  for (int k = 0; k < 4; ++k) step(10 + k, false);
  EXPECT_EQ(test::AllocationCount() - before, 0) << name;
}

TEST(HybridAllocTest, MoeRunDoesNotAllocate) {
  CheckNoAllocation("tiny_qwen3_moe");
}
TEST(HybridAllocTest, Qwen35RunDoesNotAllocate) {
  CheckNoAllocation("tiny_qwen35");
}
TEST(HybridAllocTest, Qwen3NextRunDoesNotAllocate) {
  CheckNoAllocation("tiny_qwen3_next");
}

}  // namespace
}  // namespace pdserve
