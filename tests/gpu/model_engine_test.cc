// EngineCore with --device cuda on the real plugin (libpdserve_cuda.so,
// loaded with dlopen() like the serving binaries do) against EngineCore on
// the CPU, stories260K (fp32): three sequences interleaved (prefill chunks
// of 3 and 5 tokens mixed with decodes, a late sequence reusing a released
// sequence's pages) generate the same greedy tokens (device sampling) and,
// with a repetition penalty, the same tokens again (Run + host sampling).
// Skips without a device, the plugin or the model.
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/engine_core.h"
#include "gtest/gtest.h"
#include "kernels/cuda/plugin/cuda_runner.h"
#include "kernels/thread_pool.h"
#include "tests/gpu/model_gpu_test_util.h"

namespace pdserve::gpu_test {
namespace {

const std::string kPlugin =
    std::string(PDSERVE_BINARY_DIR) + "/kernels/cuda/plugin/libpdserve_cuda.so";

struct Seq {
  SequenceId id;
  std::vector<int32_t> prompt;
};

std::vector<int32_t> Tokens(int n, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> t = {1};
  while (static_cast<int>(t.size()) < n) {
    seed = seed * 1664525u + 1013904223u;
    t.push_back(static_cast<int32_t>(3 + (seed >> 8) % (vocab - 3)));
  }
  return t;
}

std::unique_ptr<EngineCore> MakeEngine(std::shared_ptr<const ModelWeights> w,
                                       ThreadPool* threads, bool cuda) {
  EngineOptions o;
  o.kv_memory.bytes = 16 << 20;
  o.max_sequences = 4;
  o.max_step_tokens = 64;
  if (cuda) {
    o.device = DeviceSpec{DeviceSpec::Kind::kCuda, 0};
    o.backend_plugin_path = kPlugin;
  }
  auto e = EngineCore::Create(std::move(w), threads, o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// Token outputs per sequence.
std::map<SequenceId, std::vector<int32_t>> Play(EngineCore& e,
                                                std::vector<Seq> seqs,
                                                const Seq& late,
                                                const SamplingParams& params) {
  std::map<SequenceId, std::vector<int32_t>> out;
  std::map<SequenceId, int64_t> pos;
  std::map<SequenceId, bool> done;
  for (const Seq& s : seqs) {
    EXPECT_TRUE(e.AddSequence(s.id, s.prompt, 256, params, {}, 24).ok());
  }
  bool added_late = false;
  for (int step = 0; step < 400; ++step) {
    std::vector<StepPlanEntry> plan;
    for (const Seq& s : seqs) {
      if (done[s.id]) continue;
      const int64_t left = static_cast<int64_t>(s.prompt.size()) - pos[s.id];
      const int64_t chunk = s.id % 2 == 0 ? 3 : 5;
      plan.push_back(
          {s.id, static_cast<int32_t>(left > 0 ? std::min(chunk, left) : 1)});
    }
    if (plan.empty()) break;
    StepResult r;
    absl::Status st = e.Step(plan, &r);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) break;
    for (const SequenceStepResult& s : r.sequences) {
      pos[s.id] = s.next_pos;
      if (s.has_token) out[s.id].push_back(s.token);
      if (s.finish != FinishReason::kNone) done[s.id] = true;
    }
    if (!added_late && done[seqs.front().id]) {
      EXPECT_TRUE(e.Release(seqs.front().id).ok());
      EXPECT_TRUE(
          e.AddSequence(late.id, late.prompt, 256, params, {}, 24).ok());
      seqs.push_back(late);
      added_late = true;
    }
  }
  EXPECT_TRUE(added_late);
  return out;
}

TEST(CudaEngineTest, CudaEngineTokensEqualCpuEngine) {
  if (cuda_runner::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  if (access(kPlugin.c_str(), R_OK) != 0) GTEST_SKIP() << "plugin not built";
  std::shared_ptr<const ModelWeights> w = LoadStories();
  if (w == nullptr) GTEST_SKIP() << "stories260K not available";
  const int64_t vocab = w->config.vocab_size;
  const std::vector<Seq> seqs = {{1, Tokens(11, vocab, 1)},
                                 {2, Tokens(7, vocab, 2)},
                                 {3, Tokens(13, vocab, 3)}};
  const Seq late{4, Tokens(9, vocab, 4)};
  ThreadPool threads(2);
  SamplingParams greedy;
  SamplingParams penalty;
  penalty.repetition_penalty = 1.3f;
  for (const SamplingParams& p : {greedy, penalty}) {
    auto cpu = MakeEngine(w, &threads, false);
    auto dev = MakeEngine(w, &threads, true);
    ASSERT_NE(cpu, nullptr);
    ASSERT_NE(dev, nullptr);
    EXPECT_NE(dev->Describe().find("cuda:0"), std::string::npos)
        << dev->Describe();
    const auto want = Play(*cpu, seqs, late, p);
    const auto got = Play(*dev, seqs, late, p);
    ASSERT_EQ(want.size(), 4u);
    EXPECT_EQ(got, want) << "repetition_penalty " << p.repetition_penalty;
  }
}

}  // namespace
}  // namespace pdserve::gpu_test
