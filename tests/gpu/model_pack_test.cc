// PackStep (kernels/cuda/plugin/runner_step.cc): how the CUDA runner lays
// out a step's inputs: graph padding, logits rows, page tables. Host code:
// runs without a device.
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/plugin/runner_internal.h"

namespace pdserve::cuda_runner {
namespace {

std::vector<int32_t> Read(const int32_t* p, int64_t n) {
  return std::vector<int32_t>(p, p + n);
}

class PackStepTest : public ::testing::Test {
 protected:
  PackStepTest() : buf_(1 << 16) {
    cfg_.use_graphs = true;
    cfg_.graph_max = 8;
    cfg_.max_positions = 1000;
    cfg_.page_size = 16;
    cfg_.scratch_page = 99;
  }
  // The "device" buffer is the staging buffer itself, so the plan's
  // pointers can be read back here.
  StepPlan Pack(const std::vector<SequenceSpan>& batch, bool sample,
                const std::vector<DeviceSamplingParams>& params = {}) {
    return PackStep(batch, params, sample, cfg_, buf_.data(), buf_.data());
  }
  PackConfig cfg_;
  std::vector<uint8_t> buf_;
};

TEST_F(PackStepTest, DecodeBatchIsPaddedToAGraphBucket) {
  const std::vector<int32_t> t = {5, 6, 7};
  const std::vector<int32_t> pa = {10, 11, 12}, pb = {20}, pc = {30, 31};
  std::vector<SequenceSpan> batch(3);
  batch[0].tokens = absl::MakeConstSpan(&t[0], 1);
  batch[0].start_pos = 40;  // page 2 of its table
  batch[0].page_table = pa;
  batch[1].tokens = absl::MakeConstSpan(&t[1], 1);
  batch[1].start_pos = 0;
  batch[1].page_table = pb;
  batch[2].tokens = absl::MakeConstSpan(&t[2], 1);
  batch[2].start_pos = 16;
  batch[2].rope_delta = 3;
  batch[2].page_table = pc;
  const StepPlan p = Pack(batch, /*sample=*/false);
  EXPECT_TRUE(p.decode);
  EXPECT_TRUE(p.graph);
  EXPECT_EQ(p.real_seqs, 3);
  EXPECT_EQ(p.seqs, 4);
  EXPECT_EQ(p.rows, 4);
  EXPECT_EQ(p.logit_rows, 4);
  EXPECT_EQ(p.kv_bound, 128);  // longest 41 -> 64 -> at least 128
  EXPECT_EQ(p.max_q_len, 1);
  EXPECT_EQ(Read(p.tokens, 4), (std::vector<int32_t>{5, 6, 7, 0}));
  EXPECT_EQ(Read(p.positions, 4), (std::vector<int32_t>{40, 0, 19, 0}));
  EXPECT_EQ(Read(p.logit_src, 4), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(Read(p.attn.q_start, 5), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(Read(p.attn.start_pos, 4), (std::vector<int32_t>{40, 0, 16, 0}));
  // Pages covering [0, start_pos + 1): 3, 1, 2; the padding row 1 scratch.
  EXPECT_EQ(Read(p.attn.page_start, 5), (std::vector<int32_t>{0, 3, 4, 6, 7}));
  EXPECT_EQ(p.pages, 7);
  EXPECT_EQ(Read(p.attn.page_table, 7),
            (std::vector<int32_t>{10, 11, 12, 20, 30, 31, 99}));
  EXPECT_EQ(p.attn.num_seqs, 4);
  EXPECT_EQ(p.attn.total_rows, 4);
  EXPECT_EQ(p.attn.max_kv_len, 128);
  // Longer contexts take the next power of two, capped by max_positions.
  batch[0].start_pos = 700;
  const std::vector<int32_t> long_table(44, 1);
  batch[0].page_table = long_table;
  EXPECT_EQ(Pack(batch, false).kv_bound, 1000);
  batch[0].start_pos = 200;
  EXPECT_EQ(Pack(batch, false).kv_bound, 256);
}

TEST_F(PackStepTest, MixedBatchRunsEagerWithAllLogitsRows) {
  const std::vector<int32_t> prompt = {1, 2, 3, 4}, one = {9};
  const std::vector<int32_t> pa = {3}, pb = {4, 5};
  std::vector<SequenceSpan> batch(2);
  batch[0].tokens = one;
  batch[0].start_pos = 20;
  batch[0].page_table = pb;
  batch[1].tokens = prompt;
  batch[1].all_logits = true;
  batch[1].page_table = pa;
  const StepPlan p = Pack(batch, false);
  EXPECT_FALSE(p.decode);
  EXPECT_FALSE(p.graph);
  EXPECT_EQ(p.seqs, 2);
  EXPECT_EQ(p.rows, 5);
  EXPECT_EQ(p.max_q_len, 4);
  EXPECT_EQ(p.kv_bound, 21);
  EXPECT_EQ(p.logit_rows, 5);
  EXPECT_EQ(Read(p.logit_src, 5), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(Read(p.positions, 5), (std::vector<int32_t>{20, 0, 1, 2, 3}));
  EXPECT_EQ(Read(p.attn.q_start, 3), (std::vector<int32_t>{0, 1, 5}));
  EXPECT_EQ(Read(p.attn.page_table, 3), (std::vector<int32_t>{4, 5, 3}));
  // Sampling: one logits row per span (its last), parameters copied.
  std::vector<DeviceSamplingParams> params(2);
  params[1].temperature = 0.7f;
  params[1].top_k = 11;
  params[1].seed = 5;
  params[1].step = 2;
  const StepPlan s = Pack(batch, /*sample=*/true, params);
  EXPECT_EQ(s.logit_rows, 2);
  EXPECT_EQ(Read(s.logit_src, 2), (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(s.params[0].temperature, 0.0f);
  EXPECT_EQ(s.params[1].temperature, 0.7f);
  EXPECT_EQ(s.params[1].top_k, 11);
  EXPECT_EQ(s.params[1].seed, 5u);
  EXPECT_EQ(s.params[1].step, 2u);
}

TEST_F(PackStepTest, GraphsOffOrTooManySequencesRunEager) {
  const std::vector<int32_t> tok(9, 1), pages = {0};
  std::vector<SequenceSpan> batch(9);
  for (int i = 0; i < 9; ++i) {
    batch[i].tokens = absl::MakeConstSpan(&tok[i], 1);
    batch[i].page_table = pages;
  }
  StepPlan p = Pack(batch, false);  // 9 > graph_max 8
  EXPECT_TRUE(p.decode);
  EXPECT_FALSE(p.graph);
  EXPECT_EQ(p.seqs, 9);
  EXPECT_EQ(p.kv_bound, 1);
  batch.resize(2);
  cfg_.use_graphs = false;
  p = Pack(batch, false);
  EXPECT_FALSE(p.graph);
  EXPECT_EQ(p.seqs, 2);
}

TEST(StepLayoutTest, ArraysDoNotOverlapAndParamsAreAligned) {
  for (int64_t rows : {1, 3, 64, 4096}) {
    for (int64_t seqs : {int64_t{1}, rows}) {
      const StepLayout l = StepLayout::For(rows, seqs);
      EXPECT_EQ(l.tokens, 0);
      EXPECT_EQ(l.positions, 4 * rows);
      EXPECT_EQ(l.logit_src, 8 * rows);
      EXPECT_EQ(l.q_start, 12 * rows);
      EXPECT_EQ(l.start_pos, l.q_start + 4 * (seqs + 1));
      EXPECT_EQ(l.page_start, l.start_pos + 4 * seqs);
      EXPECT_GE(l.params, l.page_start + 4 * (seqs + 1));
      EXPECT_EQ(l.params % 16, 0);
      EXPECT_GE(
          l.page_table,
          l.params + static_cast<int64_t>(sizeof(cuda::SampleParams)) * seqs);
      EXPECT_EQ(l.page_table % 16, 0);
    }
  }
}

}  // namespace
}  // namespace pdserve::cuda_runner
