// ForwardPass: agreement with a plain reference, chunking and batch
// invariance (bitwise), input validation, work accounting.
#include "engine/model/forward.h"
#include "engine/model/sequence_runner.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/thread_pool.h"
#include "tests/engine/model_test_util.h"

namespace pdserve {
namespace {

using testing_model::MakeTinyModel;
using testing_model::ReferenceLogits;
using testing_model::TinyModel;
using testing_model::TinyShape;
using ::testing::HasSubstr;

constexpr int64_t kPageSize = 4;

// A model, a KV storage and a forward pass, with a trivial page allocator:
// sequence i owns pages [i * 16, (i + 1) * 16).
struct Rig {
  explicit Rig(const TinyShape& shape, int threads = 2, int64_t max_tokens = 64)
      : model(MakeTinyModel(shape)),
        kv(model->weights.config.num_layers, model->weights.config.kv_dim(),
           kPageSize, 64),
        pool(threads) {
    auto fp = ForwardPass::Create(model->weights, kv, pool, max_tokens);
    EXPECT_TRUE(fp.ok()) << fp.status();
    forward = std::move(*fp);
    for (int s = 0; s < 4; ++s) {
      pages[s].resize(16);
      std::iota(pages[s].begin(), pages[s].end(), s * 16);
    }
  }
  int64_t vocab() const { return model->weights.config.vocab_size; }
  SequenceSpan Span(int seq, const std::vector<int32_t>& tokens, int64_t begin,
                    int64_t end, bool all = false) {
    SequenceSpan s;
    s.tokens = absl::MakeConstSpan(tokens).subspan(begin, end - begin);
    s.start_pos = begin;
    s.page_table = pages[seq];
    s.all_logits = all;
    return s;
  }
  std::vector<float> Run(const std::vector<SequenceSpan>& batch,
                         ForwardStats* stats = nullptr) {
    std::vector<float> logits(ForwardPass::LogitRows(batch) * vocab());
    absl::Status st = forward->Run(batch, absl::MakeSpan(logits), stats);
    EXPECT_TRUE(st.ok()) << st;
    return logits;
  }

  std::unique_ptr<TinyModel> model;
  KvStorage kv;
  ThreadPool pool;
  std::unique_ptr<ForwardPass> forward;
  std::vector<int32_t> pages[4];
};

std::vector<int32_t> Tokens(int n, int vocab, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 7 + salt * 13 + 3) % vocab;
  return t;
}

float MaxAbsDiff(const float* a, const float* b, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

struct ArchCase {
  const char* name;
  TinyShape shape;
};

class ForwardReferenceTest : public ::testing::TestWithParam<ArchCase> {};

TEST_P(ForwardReferenceTest, PrefillAndDecodeMatchReference) {
  Rig rig(GetParam().shape);
  const std::vector<int32_t> tokens = Tokens(13, rig.vocab(), 1);
  const std::vector<float> ref = ReferenceLogits(*rig.model, tokens);
  // Prefill 9 tokens with all logits, then 4 single-token decode steps.
  std::vector<float> got = rig.Run({rig.Span(0, tokens, 0, 9, true)});
  for (int t = 10; t <= 13; ++t) {
    std::vector<float> row = rig.Run({rig.Span(0, tokens, t - 1, t)});
    got.insert(got.end(), row.begin(), row.end());
  }
  ASSERT_EQ(got.size(), ref.size());
  float max_ref = 0;
  for (float v : ref) max_ref = std::max(max_ref, std::fabs(v));
  EXPECT_GT(max_ref, 1.0f);  // logits are not trivially small
  EXPECT_LT(MaxAbsDiff(got.data(), ref.data(), ref.size()), 1e-4f);
}

TinyShape Llama(RopeStyle rope) {
  TinyShape s;
  s.rope = rope;
  return s;
}
TinyShape Qwen3() {
  TinyShape s;
  s.arch = Architecture::kQwen3;
  s.head_dim = 12;  // q_dim 48 != hidden 32
  s.tied = true;
  s.seed = 7;
  return s;
}
TinyShape Mha() {
  TinyShape s;
  s.kv_heads = 4;
  s.seed = 3;
  return s;
}

TinyShape WideHeads(Architecture arch) {  // head_dim 32: vectorised attention
  TinyShape s;
  s.arch = arch;
  s.hidden = 64;
  s.head_dim = 32;
  s.seed = 11;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Arch, ForwardReferenceTest,
    ::testing::Values(ArchCase{"llama_neox", Llama(RopeStyle::kNeox)},
                      ArchCase{"llama_interleaved",
                               Llama(RopeStyle::kInterleaved)},
                      ArchCase{"qwen3", Qwen3()}, ArchCase{"mha", Mha()},
                      ArchCase{"llama_hd32", WideHeads(Architecture::kLlama)},
                      ArchCase{"qwen3_hd32", WideHeads(Architecture::kQwen3)}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ForwardTest, RopeDeltaShiftsPositionsOnly) {
  // A common shift of every position leaves relative positions, and so the
  // logits, unchanged up to rounding: proves the delta reaches RoPE and only
  // RoPE (KV slots stay at plain positions).
  Rig rig(Qwen3());
  const std::vector<int32_t> tokens = Tokens(10, rig.vocab(), 2);
  std::vector<float> plain = rig.Run({rig.Span(0, tokens, 0, 10, true)});
  SequenceSpan shifted = rig.Span(1, tokens, 0, 10, true);
  shifted.rope_delta = 37;
  std::vector<float> moved = rig.Run({shifted});
  EXPECT_LT(MaxAbsDiff(plain.data(), moved.data(), plain.size()), 1e-3f);
  EXPECT_NE(0, std::memcmp(plain.data(), moved.data(), plain.size() * 4));
  const std::vector<float> ref = ReferenceLogits(*rig.model, tokens, 37);
  EXPECT_LT(MaxAbsDiff(moved.data(), ref.data(), ref.size()), 1e-4f);
}

class InvarianceTest : public ::testing::TestWithParam<DType> {};

TEST_P(InvarianceTest, ChunkingAndBatchingAreBitwiseInvariant) {
  TinyShape shape;
  shape.dtype = GetParam();
  shape.hidden = 64;  // quantized rows need multiples of 32
  shape.inter = 96;
  shape.head_dim = 16;
  Rig alone(shape), batched(shape), chunked(shape, /*threads=*/1);
  const int vocab = alone.vocab();
  const std::vector<int32_t> a = Tokens(11, vocab, 1);
  const std::vector<int32_t> b = Tokens(7, vocab, 2);
  const std::vector<int32_t> c = Tokens(20, vocab, 3);

  // A alone: prefill all 11 with all logits.
  const std::vector<float> ref = alone.Run({alone.Span(0, a, 0, 11, true)});

  // A chunked 3 + 5 + 1 + 2, single thread.
  std::vector<float> got;
  for (auto [b0, e0] : {std::pair{0, 3}, {3, 8}, {8, 9}, {9, 11}}) {
    std::vector<float> part = chunked.Run({chunked.Span(0, a, b0, e0, true)});
    got.insert(got.end(), part.begin(), part.end());
  }
  ASSERT_EQ(got.size(), ref.size());
  EXPECT_EQ(0, std::memcmp(got.data(), ref.data(), ref.size() * 4));

  // A in batches with other sequences at other positions, 2 threads:
  // step 1: B prefill 4, A prefill 6, C prefill 20;
  // step 2: C decode, A prefill 5 (all logits), B prefill 3.
  std::vector<float> s1 = batched.Run({batched.Span(1, b, 0, 4),
                                       batched.Span(0, a, 0, 6, true),
                                       batched.Span(2, c, 0, 20)});
  std::vector<float> s2 = batched.Run(
      {batched.Span(2, c, 19, 20), batched.Span(0, a, 6, 11, true),
       batched.Span(1, b, 4, 7)});
  // Rows: s1 = [B last][A 0..5][C last]; s2 = [C][A 6..10][B last].
  EXPECT_EQ(0, std::memcmp(s1.data() + vocab, ref.data(), 6 * vocab * 4));
  EXPECT_EQ(0, std::memcmp(s2.data() + vocab, ref.data() + 6 * vocab,
                           5 * vocab * 4));
}

INSTANTIATE_TEST_SUITE_P(DTypes, InvarianceTest,
                         ::testing::Values(DType::kF32, DType::kF16,
                                           DType::kBF16, DType::kQ8_0,
                                           DType::kQ4_0, DType::kQ4_1),
                         [](const auto& info) {
                           return std::string(DTypeName(info.param));
                         });

TEST(ForwardTest, QuantizedModelStaysCloseToReference) {
  TinyShape shape;
  shape.dtype = DType::kQ8_0;
  shape.hidden = 64;
  shape.inter = 64;
  shape.head_dim = 16;
  Rig rig(shape);
  const std::vector<int32_t> tokens = Tokens(8, rig.vocab(), 4);
  // The reference uses the dequantized weights; only the 8-bit activation
  // rounding of the quantized kernels remains (measured: ~2.5% of the
  // largest logit per layer on these random weights; F32 agrees to 3e-6).
  const std::vector<float> ref = ReferenceLogits(*rig.model, tokens);
  std::vector<float> got = rig.Run({rig.Span(0, tokens, 0, 8, true)});
  float max_ref = 0;
  for (float v : ref) max_ref = std::max(max_ref, std::fabs(v));
  EXPECT_LT(MaxAbsDiff(got.data(), ref.data(), ref.size()), 0.06f * max_ref);
  EXPECT_GT(MaxAbsDiff(got.data(), ref.data(), ref.size()), 0.0f);
}

TEST(ForwardTest, ValidationNamesTheNumbers) {
  Rig rig(TinyShape{}, 1, /*max_tokens=*/16);
  const std::vector<int32_t> ok = {1, 2, 3};
  std::vector<float> logits(4 * rig.vocab());
  auto run = [&](std::vector<SequenceSpan> batch, size_t n_logits = 0) {
    return rig.forward->Run(
        batch, absl::MakeSpan(logits.data(),
                              n_logits ? n_logits : logits.size()));
  };
  const std::vector<int32_t> bad_token = {1, 40, 2};
  absl::Status s = run({rig.Span(0, bad_token, 0, 3)});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("id 40 outside the vocabulary [0, 40)"));

  SequenceSpan short_table = rig.Span(0, ok, 0, 3);
  short_table.start_pos = 6;  // positions [0, 9) need 3 pages of 4
  short_table.page_table = absl::MakeConstSpan(rig.pages[0]).subspan(0, 2);
  s = run({short_table});
  EXPECT_THAT(s.message(), HasSubstr("page table has 2 pages"));
  EXPECT_THAT(s.message(), HasSubstr("need 3 of 4 tokens"));

  std::vector<int32_t> bad_pages = {0, 99};
  SequenceSpan bad_page = rig.Span(0, ok, 0, 3);
  bad_page.start_pos = 4;
  bad_page.page_table = bad_pages;
  s = run({bad_page});
  EXPECT_THAT(s.message(), HasSubstr("is page 99, outside the storage's 64"));

  const std::vector<int32_t> many(17, 1);
  s = run({rig.Span(0, many, 0, 17)});
  EXPECT_THAT(s.message(),
              HasSubstr("17 tokens, more than max_batch_tokens 16"));

  s = run({rig.Span(0, ok, 0, 3, true)}, 2 * rig.vocab());
  EXPECT_THAT(s.message(), HasSubstr("holds 80 floats, need 120"));

  SequenceSpan empty;
  empty.page_table = rig.pages[0];
  s = run({empty});
  EXPECT_THAT(s.message(), HasSubstr("span 0 has no tokens"));

  SequenceSpan too_far = rig.Span(0, ok, 0, 3);
  too_far.start_pos = 510;
  too_far.page_table = {};
  s = run({too_far});
  EXPECT_THAT(s.message(), HasSubstr("reaches position 513 but at most 256"));

  // start_pos + size would overflow int64: refused, not wrapped.
  too_far.start_pos = std::numeric_limits<int64_t>::max() - 1;
  s = run({too_far});
  EXPECT_THAT(s.message(),
              HasSubstr("reaches position 9223372036854775806 + 3 but at most "
                        "256"));

  KvStorage wrong(3, 16, 4, 4);
  ThreadPool pool(1);
  auto fp = ForwardPass::Create(rig.model->weights, wrong, pool, 8);
  EXPECT_THAT(fp.status().message(),
              HasSubstr("3 layers of kv_dim 16; model tiny needs 2 layers of "
                        "kv_dim 16"));
}

TEST(ForwardTest, StatsCountWeightsKvAndFlops) {
  TinyShape shape;
  Rig rig(shape);
  const ModelConfig& c = rig.model->weights.config;
  const std::vector<int32_t> tokens = Tokens(6, rig.vocab(), 5);
  ForwardStats stats;
  rig.Run({rig.Span(0, tokens, 0, 5)}, &stats);
  rig.Run({rig.Span(0, tokens, 5, 6)}, &stats);
  EXPECT_EQ(stats.steps, 2);
  EXPECT_EQ(stats.tokens, 6);
  EXPECT_EQ(stats.logit_rows, 2);
  const int64_t per_token_kv = c.num_layers * 2 * c.kv_dim() * 4;
  EXPECT_EQ(stats.kv_bytes_written, 6 * per_token_kv);
  EXPECT_EQ(stats.kv_bytes_read, (5 + 6) * per_token_kv);
  const int64_t layer_params =
      c.num_layers * (c.hidden_size * (2 * c.q_dim() + 2 * c.kv_dim()) +
                      3 * c.hidden_size * c.intermediate_size);
  const int64_t lm = c.vocab_size * c.hidden_size;
  const int64_t norms = (2 * c.num_layers + 1) * c.hidden_size;
  EXPECT_EQ(stats.weight_bytes_read,
            2 * (layer_params + lm + norms) * 4 + 6 * c.hidden_size * 4);
  // Attention: keys attended = 1+..+5 then 6, QK and PV per head.
  const int64_t attn = 2 * (15 + 6) * c.head_dim * c.num_heads;
  EXPECT_EQ(stats.flops,
            2 * (6 * layer_params + c.num_layers * attn + 2 * lm));
}

TEST(SequenceRunnerTest, ChunkedFeedEqualsOnePassAndCapacityIsEnforced) {
  Rig rig(TinyShape{});
  const std::vector<int32_t> tokens = Tokens(10, rig.vocab(), 6);
  const std::vector<float> whole = rig.Run({rig.Span(0, tokens, 0, 10)});
  auto runner =
      SequenceRunner::Create(rig.model->weights, rig.pool, /*capacity=*/11,
                             /*max_chunk=*/3);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto last = (*runner)->Feed(tokens);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ((*runner)->stats().steps, 4);  // 3 + 3 + 3 + 1
  EXPECT_EQ(0, std::memcmp(last->data(), whole.data(), whole.size() * 4));
  const std::vector<int32_t> two = {1, 2};
  EXPECT_THAT((*runner)->Feed(two).status().message(),
              HasSubstr("position 10 cannot take 2 more tokens: capacity is "
                        "11"));
  (*runner)->Reset();
  auto again = (*runner)->Feed(tokens);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(0, std::memcmp(again->data(), whole.data(), whole.size() * 4));
  EXPECT_FALSE(
      SequenceRunner::Create(rig.model->weights, rig.pool, 513, 8).ok());
}

TEST(ForwardTest, EmptyBatchIsANoOp) {
  Rig rig(TinyShape{});
  ForwardStats stats;
  EXPECT_TRUE(rig.forward->Run({}, {}, &stats).ok());
  EXPECT_EQ(stats.steps, 0);
}

}  // namespace
}  // namespace pdserve
