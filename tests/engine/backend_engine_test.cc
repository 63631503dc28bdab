// The plugin route end to end without a GPU: EngineCore with --device cuda
// loads the test plugin (backend_test_plugin.cc, a shared library that
// implements plugin_abi.h on the CPU with its own KV storage, state slots and
// device-side sampling) through dlopen(), and generates exactly the tokens
// and log-probabilities of the CPU backend: greedy (sampled "on the
// device"), with penalties (Run + host sampling), for a hybrid model whose
// state lives in the plugin by slot. Also: the KV budget is a fraction of
// the device's free memory, and the no-device error reaches the caller.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/engine_core.h"
#include "engine/loader/model_loader.h"
#include "engine/model/sampler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/thread_pool.h"
#include "tests/common/env_guard.h"
#include "tests/engine/engine_core_test_util.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const DeviceSpec kCuda0{DeviceSpec::Kind::kCuda, 0};

struct Seq {
  SequenceId id;
  std::vector<int32_t> prompt;
  SamplingParams params;
  int64_t max_new = 8;
};

struct Output {
  std::map<SequenceId, std::vector<int32_t>> tokens;
  std::map<SequenceId, std::vector<float>> logprobs;
  int steps_with_host_logits = 0;  // steps where LastLogits was non-empty
  int sampling_steps = 0;          // steps that sampled some sequence
};

EngineOptions Options(const DeviceSpec& device) {
  EngineOptions o;
  o.kv_memory.bytes = 8 << 20;
  o.max_sequences = 4;
  o.max_step_tokens = 64;
  o.device = device;
  // Like for like: both f32 (the exact reference; bf16 has its own test).
  o.kv_dtype = KvDType::kF32;
  if (!device.is_cpu()) o.backend_plugin_path = PDSERVE_TEST_PLUGIN;
  return o;
}

// Runs `seqs` interleaved (prefill chunks of 3 or 5 mixed with decodes);
// `late` is admitted when the first sequence finishes and is released, so
// it reuses that sequence's pages and state slot.
Output Play(EngineCore& e, std::vector<Seq> seqs, const Seq* late) {
  Output out;
  std::map<SequenceId, int64_t> pos;
  std::map<SequenceId, bool> done;
  for (const Seq& s : seqs) {
    absl::Status st =
        e.AddSequence(s.id, s.prompt, 128, s.params, {}, s.max_new);
    EXPECT_TRUE(st.ok()) << st;
  }
  bool added_late = late == nullptr;
  for (int step = 0; step < 300; ++step) {
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
    bool sampled = false;
    for (const SequenceStepResult& s : r.sequences) {
      pos[s.id] = s.next_pos;
      if (s.has_token) {
        sampled = true;
        out.tokens[s.id].push_back(s.token);
        out.logprobs[s.id].push_back(s.logprob);
        if (!e.LastLogits(s.id).empty()) ++out.steps_with_host_logits;
      }
      if (s.finish != FinishReason::kNone) done[s.id] = true;
    }
    out.sampling_steps += sampled ? 1 : 0;
    if (!added_late && done[seqs.front().id]) {
      EXPECT_TRUE(e.Release(seqs.front().id).ok());
      EXPECT_TRUE(e.AddSequence(late->id, late->prompt, 128, late->params, {},
                                late->max_new)
                      .ok());
      seqs.push_back(*late);
      added_late = true;
    }
  }
  EXPECT_TRUE(added_late);
  return out;
}

std::unique_ptr<EngineCore> MakeEngine(std::shared_ptr<const ModelWeights> w,
                                       ThreadPool* threads,
                                       const EngineOptions& o) {
  auto e = EngineCore::Create(std::move(w), threads, o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

std::vector<Seq> ThreeSequences(int64_t vocab, const SamplingParams& p) {
  return {{1, testing_util::RandomTokens(11, vocab, 1), p},
          {2, testing_util::RandomTokens(7, vocab, 2), p},
          {3, testing_util::RandomTokens(13, vocab, 3), p}};
}

TEST(BackendEngineTest, PluginGreedyTokensEqualCpu) {
  std::shared_ptr<const ModelWeights> w = testing_util::TinyRandomModel(21);
  ThreadPool threads(2);
  const auto seqs = ThreeSequences(w->config.vocab_size, SamplingParams{});
  const Seq late{4, testing_util::RandomTokens(9, w->config.vocab_size, 4), {}};

  auto cpu = MakeEngine(w, &threads, Options(DeviceSpec{}));
  auto dev = MakeEngine(w, &threads, Options(kCuda0));
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(dev, nullptr);
  EXPECT_EQ(cpu->Describe(), "cpu");
  EXPECT_EQ(cpu->device().ToString(), "cpu");
  EXPECT_THAT(dev->Describe(),
              StartsWith("test-plugin:0 (cpu, owned storage)"));
  EXPECT_EQ(dev->device().ToString(), "cuda:0");
  EXPECT_EQ(dev->Geometry().num_pages, cpu->Geometry().num_pages);

  const Output a = Play(*cpu, seqs, &late);
  const Output b = Play(*dev, seqs, &late);
  ASSERT_EQ(a.tokens.size(), 4u);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.logprobs, b.logprobs);  // same logits, same log-softmax
  for (const auto& [id, t] : a.tokens) EXPECT_EQ(t.size(), 8u) << id;
  // CPU: host logits on every sampling step; plugin: sampled on the
  // "device", no logits reached the host.
  EXPECT_GT(a.steps_with_host_logits, 0);
  EXPECT_EQ(b.steps_with_host_logits, 0);
  EXPECT_EQ(dev->Stats().pool.sequences, 0);
}

TEST(BackendEngineTest, PenaltiesSampleOnTheHostFromPluginLogits) {
  std::shared_ptr<const ModelWeights> w = testing_util::TinyRandomModel(22);
  ThreadPool threads(2);
  SamplingParams pen;
  pen.repetition_penalty = 1.5f;
  pen.frequency_penalty = 0.5f;
  auto seqs = ThreeSequences(w->config.vocab_size, SamplingParams{});
  // One penalised sequence: the steps it samples in use Run + host
  // sampling. Its long prompt (7 chunks of 3) leaves steps where only the
  // greedy ones sample (on the "device").
  seqs[1].params = pen;
  seqs[1].prompt = testing_util::RandomTokens(20, w->config.vocab_size, 9);
  const Seq late{4, testing_util::RandomTokens(9, w->config.vocab_size, 4), {}};

  auto cpu = MakeEngine(w, &threads, Options(DeviceSpec{}));
  auto dev = MakeEngine(w, &threads, Options(kCuda0));
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(dev, nullptr);
  const Output a = Play(*cpu, seqs, &late);
  const Output b = Play(*dev, seqs, &late);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.logprobs, b.logprobs);
  EXPECT_GT(b.steps_with_host_logits, 0);  // host sampling happened
  EXPECT_LT(b.steps_with_host_logits, a.steps_with_host_logits);
}

TEST(BackendEngineTest, HybridStateLivesInThePluginBySlot) {
  auto loaded =
      LoadModel(std::string(PDSERVE_TESTDATA_DIR) + "/hybrid/tiny_qwen35");
  if (!loaded.ok()) GTEST_SKIP() << loaded.status();
  std::shared_ptr<const ModelWeights> w = std::move(*loaded);
  ASSERT_GT(w->config.linear_state_floats(), 0);
  ThreadPool threads(2);
  const std::vector<Seq> seqs = {{1, {1, 9, 33, 4, 71, 12, 5}, {}},
                                 {2, {1, 40, 41, 42, 43, 44, 45, 46, 47}, {}},
                                 {3, {1, 20, 21, 22}, {}}};
  const Seq late{4, {1, 60, 2, 61, 3, 62, 4, 63, 5}, {}};
  auto cpu = MakeEngine(w, &threads, Options(DeviceSpec{}));
  auto dev = MakeEngine(w, &threads, Options(kCuda0));
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(dev, nullptr);
  const Output a = Play(*cpu, seqs, &late);
  const Output b = Play(*dev, seqs, &late);
  ASSERT_EQ(a.tokens.size(), 4u);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.logprobs, b.logprobs);
}

TEST(BackendEngineTest, SeededDeviceSamplingIsReproducible) {
  std::shared_ptr<const ModelWeights> w = testing_util::TinyRandomModel(23);
  ThreadPool threads(2);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 20;
  p.seed = 77;
  const auto seqs = ThreeSequences(w->config.vocab_size, p);
  auto d1 = MakeEngine(w, &threads, Options(kCuda0));
  auto d2 = MakeEngine(w, &threads, Options(kCuda0));
  ASSERT_NE(d1, nullptr);
  ASSERT_NE(d2, nullptr);
  const Output a = Play(*d1, seqs, nullptr);
  const Output b = Play(*d2, seqs, nullptr);
  EXPECT_EQ(a.tokens, b.tokens);
  for (const auto& [id, t] : a.tokens) {
    ASSERT_EQ(t.size(), 8u);
    for (int32_t tok : t) {
      EXPECT_GE(tok, 0);
      EXPECT_LT(tok, w->config.vocab_size);
    }
  }
}

using ::pdserve::testing::EnvGuard;

// A backend whose RunAndSample answers UNIMPLEMENTED gets Run + host
// sampling for that step: same tokens, host logits present.
TEST(BackendEngineTest, UnimplementedDeviceSamplingFallsBackToRun) {
  std::shared_ptr<const ModelWeights> w = testing_util::TinyRandomModel(27);
  ThreadPool threads(2);
  const auto seqs = ThreeSequences(w->config.vocab_size, SamplingParams{});
  auto cpu = MakeEngine(w, &threads, Options(DeviceSpec{}));
  auto dev = MakeEngine(w, &threads, Options(kCuda0));
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(dev, nullptr);
  EnvGuard off("PDSERVE_TEST_PLUGIN_NO_SAMPLING", "1");
  const Output a = Play(*cpu, seqs, nullptr);
  const Output b = Play(*dev, seqs, nullptr);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.logprobs, b.logprobs);
  EXPECT_EQ(b.steps_with_host_logits, a.steps_with_host_logits);
  EXPECT_GT(b.steps_with_host_logits, 0);
}

TEST(BackendEngineTest, FractionalBudgetIsOfDeviceFreeMemory) {
  std::shared_ptr<const ModelWeights> w = testing_util::TinyRandomModel(24);
  ThreadPool threads(1);
  // Found through PDSERVE_CUDA_PLUGIN, the way a deployment points at it.
  EnvGuard env("PDSERVE_CUDA_PLUGIN", PDSERVE_TEST_PLUGIN);
  EngineOptions o;
  o.device = kCuda0;
  o.kv_memory.fraction = 0.5;
  o.max_sequences = 4;
  auto e = EngineCore::Create(w, &threads, o);
  ASSERT_TRUE(e.ok()) << e.status();
  // The test plugin reports 64 MiB free; the weights will take their part.
  ASSERT_GT(w->weight_bytes, 0);
  EXPECT_EQ(
      (*e)->Geometry().budget_bytes,
      static_cast<int64_t>(
          static_cast<double>((int64_t{64} << 20) - w->weight_bytes) * 0.5));
  EXPECT_THAT((*e)->Describe(), StartsWith("test-plugin:0"));
}

TEST(BackendEngineTest, NoDeviceFailsCreateWithTheDriverText) {
  std::shared_ptr<const ModelWeights> w = testing_util::TinyRandomModel(25);
  ThreadPool threads(1);
  EnvGuard fail("PDSERVE_TEST_PLUGIN_FAIL", "1");
  auto e = EngineCore::Create(w, &threads, Options(kCuda0));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(e.status().message(),
              HasSubstr("no CUDA-capable device is detected"));
}

// The peak a device engine's bandwidth utilisation is measured against is
// the device's own read probe (the plugin's), never the host's; the CPU
// backend has none.
TEST(BackendEngineTest, DeviceReadBandwidthComesFromThePlugin) {
  std::shared_ptr<const ModelWeights> w = testing_util::TinyRandomModel(28);
  ThreadPool threads(1);
  auto device = EngineCore::Create(w, &threads, Options(kCuda0));
  ASSERT_TRUE(device.ok()) << device.status();
  absl::StatusOr<double> bw = (*device)->MeasureDeviceReadBandwidth(0);
  ASSERT_TRUE(bw.ok()) << bw.status();
  EXPECT_EQ(*bw, 3.25e12);  // backend_test_plugin.cc kTestPluginReadBandwidth
  {
    EnvGuard off("PDSERVE_TEST_PLUGIN_NO_PROBE", "1");
    absl::StatusOr<double> failed =
        (*device)->MeasureDeviceReadBandwidth(int64_t{1} << 20);
    ASSERT_FALSE(failed.ok());
    EXPECT_THAT(failed.status().message(), HasSubstr("probe of 1048576 bytes"));
  }
  auto cpu = EngineCore::Create(w, &threads, Options(DeviceSpec{}));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->MeasureDeviceReadBandwidth(0).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(BackendEngineTest, MissingPluginFailsCreate) {
  std::shared_ptr<const ModelWeights> w = testing_util::TinyRandomModel(26);
  ThreadPool threads(1);
  EngineOptions o = Options(kCuda0);
  o.backend_plugin_path = "/nonexistent/libpdserve_cuda.so";
  auto e = EngineCore::Create(w, &threads, o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(e.status().message(),
              HasSubstr("/nonexistent/libpdserve_cuda.so: no such file"));
}

}  // namespace
// The device KV cache is bf16 by default (as the CPU's), f32 on request;
// bf16 through the plugin gives the CPU's bf16 tokens; f16 and q8_0 are
// refused naming the flag.
TEST(BackendEngineTest, DeviceKvIsBf16ByDefaultAndRefusesF16AndQ8) {
  std::shared_ptr<const ModelWeights> w = testing_util::TinyRandomModel(27);
  ThreadPool threads(2);
  EngineOptions o = Options(kCuda0);
  o.kv_dtype.reset();
  auto dev = MakeEngine(w, &threads, o);
  ASSERT_NE(dev, nullptr);
  EXPECT_EQ(dev->Geometry().dtype, KvDType::kBF16);
  EngineOptions c = Options(DeviceSpec{});
  c.kv_dtype = KvDType::kBF16;
  auto cpu = MakeEngine(w, &threads, c);
  ASSERT_NE(cpu, nullptr);
  const auto seqs = ThreeSequences(w->config.vocab_size, SamplingParams{});
  EXPECT_EQ(Play(*cpu, seqs, nullptr).tokens, Play(*dev, seqs, nullptr).tokens);
  for (KvDType refused : {KvDType::kF16, KvDType::kQ8_0}) {
    o.kv_dtype = refused;
    auto core = EngineCore::Create(w, &threads, o);
    ASSERT_FALSE(core.ok());
    EXPECT_EQ(core.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(core.status().message()),
                HasSubstr(absl::StrCat("--kv-dtype ", KvDTypeName(refused),
                                       " is not supported on cuda:0")));
  }
}

}  // namespace pdserve
