// EngineCore: admission checks, plan validation, chunked prefill ==
// one-shot prefill, batch invariance, capacity finish, page accounting.
#include "engine/core/engine_core.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/loader/model_loader.h"
#include "engine/model/sampler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/thread_pool.h"
#include "tests/engine/engine_core_test_util.h"

namespace pdserve {
namespace {

using testing_util::RandomTokens;
using testing_util::TinyRandomModel;

SamplingParams Greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

std::unique_ptr<EngineCore> MakeEngine(std::shared_ptr<const ModelWeights> w,
                                       ThreadPool* threads,
                                       int64_t kv_bytes = 8 << 20,
                                       int64_t max_sequences = 32,
                                       int64_t max_step_tokens = 1024) {
  EngineOptions o;
  o.kv_memory = {.bytes = kv_bytes};
  o.max_sequences = max_sequences;
  o.max_step_tokens = max_step_tokens;
  absl::StatusOr<std::unique_ptr<EngineCore>> e =
      EngineCore::Create(std::move(w), threads, std::move(o));
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// Runs `id` alone: prefill in chunks of `chunk`, then decodes until it
// finishes. Returns the generated tokens; `prefill_logits` (optional) gets
// the logits row after each chunk keyed by the position after the chunk.
std::vector<int32_t> RunAlone(EngineCore& e, SequenceId id,
                              const std::vector<int32_t>& prompt, int chunk,
                              int64_t max_new,
                              std::map<int64_t, std::vector<float>>*
                                  prefill_logits = nullptr) {
  const int64_t capacity =
      std::min<int64_t>(e.model_config().max_context, 1024);
  EXPECT_TRUE(
      e.AddSequence(id, prompt, capacity, Greedy(), {}, max_new).ok());
  std::vector<int32_t> out;
  StepResult r;
  int64_t pos = 0;
  while (true) {
    int32_t n = 1;
    if (pos < static_cast<int64_t>(prompt.size())) {
      n = static_cast<int32_t>(
          std::min<int64_t>(chunk, static_cast<int64_t>(prompt.size()) - pos));
    }
    absl::Status s = e.Step({{id, n}}, &r);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) break;
    pos = r.sequences[0].next_pos;
    if (prefill_logits != nullptr && !r.sequences[0].has_token) {
      absl::Span<const float> l = e.LastLogits(id);
      (*prefill_logits)[pos] = std::vector<float>(l.begin(), l.end());
    }
    if (prefill_logits != nullptr && r.sequences[0].has_token &&
        out.empty()) {
      absl::Span<const float> l = e.LastLogits(id);
      (*prefill_logits)[pos] = std::vector<float>(l.begin(), l.end());
    }
    if (r.sequences[0].has_token) out.push_back(r.sequences[0].token);
    if (r.sequences[0].finish != FinishReason::kNone) break;
  }
  EXPECT_TRUE(e.Release(id).ok());
  return out;
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0.0f;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    m = std::max(m, std::fabs(a[i] - b[i]));
  }
  return m;
}

class EngineCoreTest : public ::testing::Test {
 protected:
  ThreadPool threads_{2};
  std::shared_ptr<const ModelWeights> model_ = TinyRandomModel(7);
};

TEST_F(EngineCoreTest, AddSequenceChecks) {
  std::unique_ptr<EngineCore> e = MakeEngine(model_, &threads_, 1 << 20);
  ASSERT_NE(e, nullptr);
  const int64_t pool_tokens = e->Geometry().total_tokens;
  std::vector<int32_t> p = {5, 6, 7};
  EXPECT_TRUE(e->AddSequence(1, p, 16, Greedy(), {}, 4).ok());
  EXPECT_EQ(e->AddSequence(1, p, 16, Greedy(), {}, 4).message(),
            "sequence 1 already exists");
  EXPECT_EQ(e->AddSequence(2, {}, 16, Greedy(), {}, 4).message(),
            "sequence 2: empty prompt");
  std::vector<int32_t> bad = {5, 97, 7};
  EXPECT_EQ(e->AddSequence(2, bad, 16, Greedy(), {}, 4).message(),
            "sequence 2: prompt token 97 at index 1 is outside the "
            "vocabulary [0, 97)");
  std::vector<int32_t> stop = {-1};
  EXPECT_EQ(e->AddSequence(2, p, 16, Greedy(), stop, 4).message(),
            "sequence 2: stop token -1 is outside the vocabulary [0, 97)");
  absl::Status long_prompt = e->AddSequence(
      2, std::vector<int32_t>(20, 5), 16, Greedy(), {}, 4);
  EXPECT_EQ(long_prompt.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(long_prompt.message(),
            "prompt of 20 tokens is longer than the sequence capacity "
            "max_seq_len=16");
  EXPECT_EQ(e->AddSequence(2, p, 2048, Greedy(), {}, 4).message(),
            "max_seq_len=2048 exceeds the model context length 1024");
  if (pool_tokens < 1024) {
    EXPECT_EQ(e->AddSequence(2, p, 1024, Greedy(), {}, 4).message(),
              absl::StrCat("max_seq_len=1024 exceeds the KV pool capacity "
                           "of ",
                           pool_tokens, " tokens"));
  }
  EXPECT_EQ(e->AddSequence(2, p, 16, Greedy(), {}, 0).message(),
            "sequence 2: max_new_tokens must be positive, got 0");
  EXPECT_EQ(e->Stats().running, 1);
}

// --max-seq-len: the engine's capacity, below the context and the pool.
TEST_F(EngineCoreTest, MaxSeqLenIsTheEnginesCapacity) {
  std::unique_ptr<EngineCore> whole = MakeEngine(model_, &threads_, 1 << 20);
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(whole->max_seq_len(),
            std::min<int64_t>(whole->model_config().max_context,
                              whole->Geometry().total_tokens));
  EngineOptions o;
  o.kv_memory = {.bytes = 1 << 20};
  o.max_seq_len = 24;
  auto e = EngineCore::Create(model_, &threads_, o);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->max_seq_len(), 24);
  std::vector<int32_t> p = {5, 6, 7};
  EXPECT_TRUE((*e)->AddSequence(1, p, 24, Greedy(), {}, 4).ok());
  EXPECT_EQ((*e)->AddSequence(2, p, 25, Greedy(), {}, 4).message(),
            "max_seq_len=25 exceeds the engine's sequence capacity of 24 "
            "tokens (--max-seq-len)");
  o.max_seq_len = 1 << 20;
  auto too_big = EngineCore::Create(model_, &threads_, o);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(too_big.status().message()).find("--max-seq-len: "),
            std::string::npos)
      << too_big.status();
}

TEST_F(EngineCoreTest, PlanValidationChangesNothing) {
  std::unique_ptr<EngineCore> e = MakeEngine(model_, &threads_);
  ASSERT_NE(e, nullptr);
  std::vector<int32_t> p = RandomTokens(10, 97, 1);
  ASSERT_TRUE(e->AddSequence(1, p, 64, Greedy(), {}, 4).ok());
  StepResult r;
  EXPECT_EQ(e->Step({{9, 1}}, &r).message(),
            "step plan names unknown sequence 9");
  EXPECT_EQ(e->Step({{1, 2}, {1, 2}}, &r).message(),
            "step plan lists sequence 1 twice");
  EXPECT_EQ(e->Step({{1, 0}}, &r).message(),
            "step plan gives sequence 1 0 tokens; must be >= 1");
  EXPECT_EQ(e->Step({{1, 11}}, &r).message(),
            "step plan gives sequence 1 11 tokens at position 0 but only 10 "
            "are pending (prompt 10, generated 0)");
  EXPECT_EQ(e->Stats().pool.used_pages, 0);
  ASSERT_TRUE(e->Step({{1, 10}}, &r).ok());
  EXPECT_TRUE(r.sequences[0].has_token);
  EXPECT_EQ(e->Step({{1, 2}}, &r).message(),
            "step plan gives sequence 1 2 tokens at position 10 but only 1 "
            "are pending (prompt 10, generated 1)");
}

TEST_F(EngineCoreTest, StepLimitAndPoolExhaustion) {
  // 4 pages of 16 tokens.
  const int64_t page_bytes = 2 * 2 * 16 * 16 * 4;  // layers*kv*tokens*dim*4
  std::unique_ptr<EngineCore> e =
      MakeEngine(model_, &threads_, 4 * std::max<int64_t>(page_bytes, 4096),
                 8, 64);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->Geometry().num_pages, 4);
  ASSERT_TRUE(e->AddSequence(1, RandomTokens(40, 97, 2), 64, Greedy(), {}, 8)
                  .ok());
  ASSERT_TRUE(e->AddSequence(2, RandomTokens(40, 97, 3), 64, Greedy(), {}, 8)
                  .ok());
  StepResult r;
  EXPECT_EQ(e->Step({{1, 40}, {2, 40}}, &r).message(),
            "step plan holds 80 tokens to compute; the engine's limit is "
            "max_step_tokens=64");
  ASSERT_TRUE(e->Step({{1, 40}}, &r).ok());  // 3 pages
  absl::Status s = e->Step({{2, 20}}, &r);   // 2 pages, 1 free
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "step needs 2 more KV pages; 1 are free");
  EXPECT_EQ(e->Stats().pool.used_pages, 3);
  // Cancel frees at once; the other sequence proceeds.
  ASSERT_TRUE(e->Release(1).ok());
  EXPECT_EQ(e->Stats().pool.free_pages, 4);
  EXPECT_TRUE(e->Step({{2, 20}}, &r).ok());
  EXPECT_EQ(e->Release(1).message(), "cannot release unknown sequence 1");
}

// Decode at full capacity: the sequence finishes with `length`; a sequence
// in the same steps is not hurt.
TEST_F(EngineCoreTest, FullCapacityFinishesWithLength) {
  std::unique_ptr<EngineCore> e = MakeEngine(model_, &threads_);
  ASSERT_NE(e, nullptr);
  std::vector<int32_t> a = RandomTokens(16, 97, 4);
  std::vector<int32_t> b = RandomTokens(5, 97, 5);
  ASSERT_TRUE(e->AddSequence(1, a, 16, Greedy(), {}, 100).ok());  // full
  ASSERT_TRUE(e->AddSequence(2, b, 64, Greedy(), {}, 100).ok());
  StepResult r;
  ASSERT_TRUE(e->Step({{1, 16}, {2, 5}}, &r).ok());
  EXPECT_TRUE(r.sequences[0].has_token);
  EXPECT_EQ(r.sequences[0].finish, FinishReason::kLength);
  EXPECT_EQ(r.sequences[0].next_pos, 16);
  EXPECT_EQ(r.sequences[1].finish, FinishReason::kNone);
  EXPECT_EQ(e->Stats().pool.used_pages, 1);  // seq 1's pages returned
  // A later decode plan for it reports the finish and runs the other.
  ASSERT_TRUE(e->Step({{1, 1}, {2, 1}}, &r).ok());
  EXPECT_EQ(r.sequences[0].finish, FinishReason::kLength);
  EXPECT_EQ(r.sequences[0].tokens_processed, 0);
  EXPECT_FALSE(r.sequences[0].has_token);
  EXPECT_EQ(r.sequences[1].tokens_processed, 1);
  EXPECT_TRUE(r.sequences[1].has_token);
  EXPECT_EQ(e->Stats().finished, 1);
  ASSERT_TRUE(e->Release(1).ok());
  EXPECT_EQ(e->Stats().finished, 0);

  // A 14-token prompt with capacity 16 yields exactly 16 - 14 + 1 tokens.
  std::vector<int32_t> c = RandomTokens(14, 97, 6);
  ASSERT_TRUE(e->AddSequence(3, c, 16, Greedy(), {}, 100).ok());
  int produced = 0;
  ASSERT_TRUE(e->Step({{3, 14}}, &r).ok());
  produced += r.sequences[0].has_token;
  while (r.sequences[0].finish == FinishReason::kNone) {
    ASSERT_TRUE(e->Step({{3, 1}}, &r).ok());
    produced += r.sequences[0].has_token;
  }
  EXPECT_EQ(produced, 3);
  EXPECT_EQ(r.sequences[0].finish, FinishReason::kLength);
  EXPECT_EQ(r.sequences[0].next_pos, 16);
}

TEST_F(EngineCoreTest, StopTokenAndMaxNewTokens) {
  std::unique_ptr<EngineCore> e = MakeEngine(model_, &threads_);
  ASSERT_NE(e, nullptr);
  std::vector<int32_t> p = RandomTokens(9, 97, 8);
  std::vector<int32_t> free_run = RunAlone(*e, 1, p, 9, 6);
  ASSERT_EQ(free_run.size(), 6u);  // max_new_tokens -> length
  // Stop at the third token of the free run.
  std::vector<int32_t> stop = {free_run[2]};
  ASSERT_TRUE(e->AddSequence(2, p, 64, Greedy(), stop, 6).ok());
  StepResult r;
  ASSERT_TRUE(e->Step({{2, 9}}, &r).ok());
  std::vector<int32_t> got = {r.sequences[0].token};
  while (r.sequences[0].finish == FinishReason::kNone) {
    ASSERT_TRUE(e->Step({{2, 1}}, &r).ok());
    got.push_back(r.sequences[0].token);
  }
  const size_t first = std::find(free_run.begin(), free_run.end(),
                                 free_run[2]) -
                       free_run.begin();
  EXPECT_EQ(got.size(), first + 1);
  EXPECT_EQ(r.sequences[0].finish, FinishReason::kStop);
  EXPECT_LE(r.sequences[0].logprob, 0.0f);
}

// Chunked prefill equals one-shot prefill: chunks of 1, 7, 64 and 512
// tokens give the same logits at every chunk boundary and the same greedy
// continuation.
void CheckChunkedPrefill(std::shared_ptr<const ModelWeights> model,
                         ThreadPool* threads, int64_t prompt_len,
                         float tolerance) {
  std::unique_ptr<EngineCore> e =
      MakeEngine(model, threads, 256 << 20, 8, 1024);
  ASSERT_NE(e, nullptr);
  std::vector<int32_t> prompt =
      RandomTokens(prompt_len, model->config.vocab_size, 11);
  std::map<int64_t, std::vector<float>> by_token;  // chunk 1: every position
  std::vector<int32_t> ref = RunAlone(*e, 1, prompt, 1, 16, &by_token);
  ASSERT_EQ(static_cast<int64_t>(by_token.size()), prompt_len);
  std::map<int64_t, std::vector<float>> one_shot;
  std::vector<int32_t> got = RunAlone(*e, 2, prompt, 100000, 16, &one_shot);
  EXPECT_EQ(got, ref);
  ASSERT_EQ(one_shot.size(), 1u);
  EXPECT_LE(MaxAbsDiff(one_shot.begin()->second, by_token[prompt_len]),
            tolerance);
  for (int chunk : {7, 64, 512}) {
    std::map<int64_t, std::vector<float>> logits;
    got = RunAlone(*e, 10 + chunk, prompt, chunk, 16, &logits);
    EXPECT_EQ(got, ref) << "chunk " << chunk;
    for (const auto& [pos, row] : logits) {
      EXPECT_LE(MaxAbsDiff(row, by_token[pos]), tolerance)
          << "chunk " << chunk << " position " << pos;
    }
  }
  EXPECT_EQ(e->Stats().pool.used_pages, 0);
}

TEST_F(EngineCoreTest, ChunkedPrefillEqualsOneShotTinyModel) {
  CheckChunkedPrefill(model_, &threads_, 600, 1e-5f);
}

std::shared_ptr<const ModelWeights> LoadStories() {
  const std::string path =
      std::string(PDSERVE_SHARED_DIR) + "/models/stories260K/stories260K.bin";
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(path);
  if (!w.ok()) return nullptr;
  return std::shared_ptr<const ModelWeights>(std::move(*w));
}

TEST_F(EngineCoreTest, ChunkedPrefillEqualsOneShotStories260K) {
  std::shared_ptr<const ModelWeights> stories = LoadStories();
  if (stories == nullptr) GTEST_SKIP() << "stories260K not available";
  CheckChunkedPrefill(stories, &threads_, 496, 1e-5f);
}

// Batch invariance: a sequence's greedy output is identical alone and in a
// step with 15 other sequences at different positions, prefilling or
// decoding.
void CheckBatchInvariance(std::shared_ptr<const ModelWeights> model,
                          ThreadPool* threads) {
  std::unique_ptr<EngineCore> e =
      MakeEngine(model, threads, 256 << 20, 32, 2048);
  ASSERT_NE(e, nullptr);
  const int64_t vocab = model->config.vocab_size;
  std::vector<int32_t> target = RandomTokens(50, vocab, 100);
  const std::vector<int32_t> alone = RunAlone(*e, 1000, target, 16, 24);
  ASSERT_EQ(alone.size(), 24u);

  // 15 companions with different prompt lengths, some started earlier.
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 15; ++i) {
    prompts.push_back(RandomTokens(5 + 23 * i % 97, vocab, 200 + i));
    ASSERT_TRUE(
        e->AddSequence(i, prompts[i], 512, Greedy(), {}, 200).ok());
  }
  StepResult r;
  // Warm up half of them into decoding.
  for (int i = 0; i < 15; i += 2) {
    ASSERT_TRUE(
        e->Step({{static_cast<SequenceId>(i),
                  static_cast<int32_t>(prompts[i].size())}},
                &r)
            .ok());
  }
  ASSERT_TRUE(e->AddSequence(1000, target, 512, Greedy(), {}, 24).ok());
  std::vector<int64_t> pos(15, 0);
  for (int i = 0; i < 15; i += 2) pos[i] = prompts[i].size();
  std::vector<int32_t> got;
  int64_t target_pos = 0;
  std::vector<StepPlanEntry> plan;
  while (true) {
    plan.clear();
    for (int i = 0; i < 15; ++i) {
      const int64_t left = static_cast<int64_t>(prompts[i].size()) - pos[i];
      plan.push_back({static_cast<SequenceId>(i),
                      static_cast<int32_t>(left > 0 ? std::min<int64_t>(left, 9)
                                                    : 1)});
    }
    const int64_t tleft = 50 - target_pos;
    plan.push_back({1000, static_cast<int32_t>(
                              tleft > 0 ? std::min<int64_t>(tleft, 16) : 1)});
    ASSERT_TRUE(e->Step(plan, &r).ok());
    for (int i = 0; i < 15; ++i) pos[i] = r.sequences[i].next_pos;
    const SequenceStepResult& t = r.sequences[15];
    target_pos = t.next_pos;
    if (t.has_token) got.push_back(t.token);
    if (t.finish != FinishReason::kNone) break;
  }
  EXPECT_EQ(got, alone);
}

TEST_F(EngineCoreTest, BatchInvarianceTinyModel) {
  CheckBatchInvariance(model_, &threads_);
}

TEST_F(EngineCoreTest, BatchInvarianceStories260K) {
  std::shared_ptr<const ModelWeights> stories = LoadStories();
  if (stories == nullptr) GTEST_SKIP() << "stories260K not available";
  CheckBatchInvariance(stories, &threads_);
}

// SmolLM2-135M-Instruct Q4_1 (the default model) when it is cached.
std::shared_ptr<const ModelWeights> LoadSmolLm2() {
  const char* cache = std::getenv("PDSERVE_CACHE");
  const char* home = std::getenv("HOME");
  const std::string dir =
      cache != nullptr && *cache != '\0'
          ? std::string(cache)
          : std::string(home != nullptr ? home : ".") + "/.cache/pdserve";
  const std::string path = dir + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (access(path.c_str(), R_OK) != 0) return nullptr;
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(path);
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return nullptr;
  return std::shared_ptr<const ModelWeights>(std::move(*w));
}

TEST_F(EngineCoreTest, ChunkedPrefillEqualsOneShotSmolLm2) {
  std::shared_ptr<const ModelWeights> smol = LoadSmolLm2();
  if (smol == nullptr) GTEST_SKIP() << "SmolLM2 Q4_1 not in the cache";
  CheckChunkedPrefill(smol, &threads_, 130, 1e-5f);
}

TEST_F(EngineCoreTest, BatchInvarianceSmolLm2) {
  std::shared_ptr<const ModelWeights> smol = LoadSmolLm2();
  if (smol == nullptr) GTEST_SKIP() << "SmolLM2 Q4_1 not in the cache";
  CheckBatchInvariance(smol, &threads_);
}

// Random interleavings at the engine level: admit, prefill chunks, decode,
// cancel, finish. Pages never leak: free capacity returns to its start.
TEST_F(EngineCoreTest, RandomScheduleReturnsAllCapacity) {
  std::unique_ptr<EngineCore> e =
      MakeEngine(model_, &threads_, 2 << 20, 16, 256);
  ASSERT_NE(e, nullptr);
  const EngineStats start = e->Stats();
  std::mt19937 rng(5);
  std::map<SequenceId, int64_t> pending;  // id -> prompt tokens left
  SequenceId next = 1;
  StepResult r;
  for (int it = 0; it < 300; ++it) {
    if (pending.size() < 10 && rng() % 3 == 0) {
      const int64_t len = 1 + rng() % 60;
      ASSERT_TRUE(e->AddSequence(next, RandomTokens(len, 97, next), 128,
                                 Greedy(), {}, 1 + rng() % 40)
                      .ok());
      pending[next++] = len;
    }
    if (!pending.empty() && rng() % 10 == 0) {  // cancel
      auto victim = pending.begin();
      std::advance(victim, rng() % pending.size());
      ASSERT_TRUE(e->Release(victim->first).ok());
      pending.erase(victim);
    }
    std::vector<StepPlanEntry> plan;
    for (const auto& [id, left] : pending) {
      plan.push_back({id, static_cast<int32_t>(
                              left > 0 ? 1 + rng() % left : 1)});
    }
    if (plan.empty()) continue;
    absl::Status s = e->Step(plan, &r);
    if (s.code() == absl::StatusCode::kResourceExhausted) {
      auto victim = pending.rbegin();  // preempt the newest
      ASSERT_TRUE(e->Release(victim->first).ok());
      pending.erase(victim->first);
      continue;
    }
    ASSERT_TRUE(s.ok()) << s;
    for (const SequenceStepResult& o : r.sequences) {
      pending[o.id] -= o.tokens_processed;
      if (o.finish != FinishReason::kNone) {
        ASSERT_TRUE(e->Release(o.id).ok());
        pending.erase(o.id);
      }
    }
    const EngineStats s2 = e->Stats();
    ASSERT_EQ(s2.pool.used_pages + s2.pool.free_pages, s2.pool.total_pages);
  }
  for (const auto& [id, left] : pending) ASSERT_TRUE(e->Release(id).ok());
  const EngineStats end = e->Stats();
  EXPECT_EQ(end.pool.free_pages, start.pool.free_pages);
  EXPECT_EQ(end.pool.used_tokens, 0);
  EXPECT_EQ(end.running, 0);
  EXPECT_EQ(e->ResidentBytes(), 0);
  EXPECT_GT(end.steps, 100);
}

// Physical KV memory follows the tokens written, not max_seq_len, and goes
// back to the OS at once when a sequence finishes or is cancelled.
TEST_F(EngineCoreTest, ResidentMemoryFollowsTokens) {
  std::unique_ptr<EngineCore> e = MakeEngine(model_, &threads_, 64 << 20);
  ASSERT_NE(e, nullptr);
  const int64_t page_bytes = e->Geometry().bytes_per_page;
  EXPECT_EQ(e->ResidentBytes(), 0);
  ASSERT_TRUE(
      e->AddSequence(1, RandomTokens(20, 97, 1), 1024, Greedy(), {}, 3).ok());
  ASSERT_TRUE(
      e->AddSequence(2, RandomTokens(40, 97, 2), 1024, Greedy(), {}, 100)
          .ok());
  EXPECT_EQ(e->ResidentBytes(), 0);  // admitted, nothing written
  StepResult r;
  ASSERT_TRUE(e->Step({{1, 20}, {2, 40}}, &r).ok());
  // 20 tokens -> 2 pages, 40 tokens -> 3 pages; capacity would be 2 x 64.
  EXPECT_EQ(e->Stats().pool.used_pages, 5);
  EXPECT_EQ(e->Stats().pool.used_tokens, 60);
  EXPECT_GT(e->ResidentBytes(), 0);
  EXPECT_LE(e->ResidentBytes(), 5 * page_bytes);
  ASSERT_TRUE(e->Step({{1, 1}, {2, 1}}, &r).ok());
  ASSERT_TRUE(e->Step({{1, 1}, {2, 1}}, &r).ok());
  EXPECT_EQ(r.sequences[0].finish, FinishReason::kLength);  // 3 tokens
  EXPECT_EQ(e->Stats().pool.used_pages, 3);  // seq 1's pages freed at finish
  EXPECT_LE(e->ResidentBytes(), 3 * page_bytes);
  ASSERT_TRUE(e->Release(2).ok());  // cancel
  EXPECT_EQ(e->ResidentBytes(), 0);
  EXPECT_EQ(e->Stats().pool.used_pages, 0);
}

TEST_F(EngineCoreTest, StepReportsBytesAndTimingsFromInjectedClock) {
  EngineOptions o;
  o.kv_memory = {.bytes = 1 << 20};
  int64_t fake_now = 0;
  o.now_ns = [&fake_now] { return fake_now += 1000; };
  absl::StatusOr<std::unique_ptr<EngineCore>> e =
      EngineCore::Create(model_, &threads_, std::move(o));
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE((*e)->AddSequence(1, RandomTokens(20, 97, 9), 64, Greedy(), {},
                                4)
                  .ok());
  StepResult r;
  ASSERT_TRUE((*e)->Step({{1, 20}}, &r).ok());
  EXPECT_EQ(r.forward_ns, 1000);
  EXPECT_EQ(r.sample_ns, 1000);
  EXPECT_EQ(r.total_ns, 3000);
  EXPECT_EQ(r.tokens_processed, 20);
  EXPECT_GT(r.weight_bytes_read, 0);
  const int64_t per_token = (*e)->Geometry().bytes_per_token;
  EXPECT_EQ(r.kv_bytes_written, 20 * per_token);
  EXPECT_GE(r.kv_bytes_read, 20 * per_token);
  // At least the matrix products: 2 FLOPs per weight per token (20 tokens).
  const ModelConfig& c = model_->config;
  const int64_t layer_weights =
      c.hidden_size * (c.q_dim() + 2 * c.kv_dim()) + c.q_dim() * c.hidden_size +
      3 * c.hidden_size * c.intermediate_size;
  EXPECT_GE(r.flops, 2 * 20 * c.num_layers * layer_weights);
  EXPECT_GT((*e)->ResidentBytes(), 0);
}

}  // namespace
}  // namespace pdserve
