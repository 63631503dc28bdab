// The Qwen3.5 hybrid through EngineCore: per-sequence conv + recurrent state
// lives in the KV pool's state slots, is carried across prefill chunks and
// decode steps of interleaved sequences, and a released slot reused by a new
// sequence starts from zero: every sequence gets the greedy tokens it gets
// alone in a plain ForwardPass (tests/engine/hybrid_test_util.h).
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/engine_core.h"
#include "engine/loader/model_loader.h"
#include "engine/model/sampler.h"
#include "gtest/gtest.h"
#include "kernels/thread_pool.h"
#include "tests/engine/hybrid_test_util.h"

namespace pdserve {
namespace {

using hybrid_test::Argmax;

std::vector<int32_t> AloneGreedy(const ModelWeights& w,
                                 const std::vector<int32_t>& prompt,
                                 int steps) {
  hybrid_test::MultiRunner run(w);
  std::vector<float> last = run.Feed(prompt, false);
  std::vector<int32_t> out;
  for (int k = 0; k < steps; ++k) {
    out.push_back(Argmax(last.data(), w.config.vocab_size));
    last = run.Feed({out.back()}, false);
  }
  return out;
}

TEST(HybridEngineTest, StateSlotsCarryAcrossChunksAndSequences) {
  auto loaded = LoadModel(hybrid_test::kHybridDir + "/tiny_qwen35");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::shared_ptr<const ModelWeights> w = std::move(*loaded);
  ThreadPool threads(2);
  EngineOptions o;
  o.kv_memory.bytes = 8 << 20;
  o.max_sequences = 4;
  o.max_step_tokens = 64;
  auto engine = EngineCore::Create(w, &threads, o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EngineCore& e = **engine;
  EXPECT_EQ(e.Geometry().linear_state_bytes_per_sequence,
            w->config.linear_state_floats() * 4);

  const int kNew = 8;
  std::map<SequenceId, std::vector<int32_t>> prompts = {
      {1, hybrid_test::ReadJson(hybrid_test::kHybridDir +
                                "/tiny_qwen35/expected.json")["prompt_ids"]
              .get<std::vector<int32_t>>()},
      {2, {1, 9, 33, 4, 71, 12, 5}},
      {3, {1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51}}};
  // Sequence 4 reuses sequence 2's slot after it is released.
  const std::vector<int32_t> late = {1, 60, 2, 61, 3, 62, 4, 63, 5};
  SamplingParams greedy;
  for (const auto& [id, p] : prompts) {
    ASSERT_TRUE(e.AddSequence(id, p, 128, greedy, {}, kNew).ok());
  }
  std::map<SequenceId, std::vector<int32_t>> got;
  std::map<SequenceId, int64_t> pos;
  bool added_late = false;
  for (int step = 0; step < 200; ++step) {
    std::vector<StepPlanEntry> plan;
    for (const auto& [id, p] : prompts) {
      if (static_cast<int>(got[id].size()) >= kNew) continue;
      const int64_t left = static_cast<int64_t>(p.size()) - pos[id];
      // Prefill chunks of 5 (3 for sequence 3) mixed with decodes.
      const int64_t chunk = id == 3 ? 3 : 5;
      plan.push_back(
          {id, static_cast<int32_t>(left > 0 ? std::min(chunk, left) : 1)});
    }
    if (plan.empty()) break;
    StepResult r;
    ASSERT_TRUE(e.Step(plan, &r).ok());
    for (const SequenceStepResult& s : r.sequences) {
      pos[s.id] = s.next_pos;
      if (s.has_token) got[s.id].push_back(s.token);
      if (s.id == 2 && static_cast<int>(got[2].size()) == kNew && !added_late) {
        ASSERT_TRUE(e.Release(2).ok());
        ASSERT_TRUE(e.AddSequence(4, late, 128, greedy, {}, kNew).ok());
        added_late = true;
      }
    }
    if (added_late && prompts.count(4) == 0) prompts[4] = late;
  }
  ASSERT_TRUE(added_late);
  for (const auto& [id, p] : prompts) {
    EXPECT_EQ(got[id], AloneGreedy(*w, p, kNew)) << "sequence " << id;
  }
}

}  // namespace
}  // namespace pdserve
