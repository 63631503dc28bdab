// engine/backend: ParseDeviceSpec; the CPU backend gives bitwise the logits
// of ForwardPass (over the engine's storage, and in owning mode with state by
// slot, as a device plugin keeps it); the plugin loader's search list and its
// errors (not a shared object, no entry symbol, ABI version,
// no device), loaded through the real dlopen() path.
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/backend/backend_loader.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/device_spec.h"
#include "engine/backend/plugin_abi.h"
#include "engine/kv/kv_pool.h"
#include "engine/loader/model_loader.h"
#include "engine/model/forward.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/thread_pool.h"
#include "tests/common/env_guard.h"
#include "tests/engine/engine_core_test_util.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

// --- ParseDeviceSpec --------------------------------------------------------

TEST(DeviceSpecTest, ParsesTheThreeForms) {
  auto cpu = ParseDeviceSpec("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(cpu->kind, DeviceSpec::Kind::kCpu);
  EXPECT_EQ(cpu->ToString(), "cpu");
  auto cuda = ParseDeviceSpec("cuda");
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_EQ(cuda->kind, DeviceSpec::Kind::kCuda);
  EXPECT_EQ(cuda->index, 0);
  EXPECT_EQ(cuda->ToString(), "cuda:0");
  auto three = ParseDeviceSpec(" CUDA:3 ");
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->index, 3);
  EXPECT_EQ(three->ToString(), "cuda:3");
  EXPECT_TRUE(*ParseDeviceSpec("cuda:1023") ==
              (DeviceSpec{DeviceSpec::Kind::kCuda, 1023}));
  EXPECT_FALSE(cpu->is_cpu() == cuda->is_cpu());
}

TEST(DeviceSpecTest, RejectsOtherText) {
  for (const char* bad : {"", "gpu", "cuda:", "cuda:-1", "cuda:1024", "cuda:1x",
                          "cuda:0:1", "cpu:0", "rocm", "cuda 1"}) {
    auto d = ParseDeviceSpec(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(d.status().message(), HasSubstr("'" + std::string(bad) + "'"));
    EXPECT_THAT(d.status().message(), HasSubstr("cpu, cuda or cuda:N"));
  }
}

// --- CPU backend == ForwardPass ------------------------------------------

KvGeometry SmallGeometry(const ModelConfig& c) {
  auto g = ComputeKvGeometry(KvModelShape::FromConfig(c),
                             KvMemoryBudget{.bytes = 8 << 20}, 16, 4,
                             [] { return absl::StatusOr<int64_t>(0); });
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

// Two interleaved sequences over three steps: a prefill with all rows and a
// partial prefill, then two decodes, then one decode of the first alone.
struct Script {
  std::vector<std::vector<int32_t>> tokens[3];
  std::vector<int> seq[3];
  bool all[3] = {true, false, false};
};

Script MakeScript(int64_t vocab) {
  Script s;
  auto t = testing_util::RandomTokens(12, vocab, 5);
  s.seq[0] = {0, 1};
  s.tokens[0] = {{t[0], t[1], t[2], t[3], t[4]}, {t[5], t[6], t[7]}};
  s.seq[1] = {1, 0};
  s.tokens[1] = {{t[8]}, {t[9]}};
  s.seq[2] = {0};
  s.tokens[2] = {{t[10]}};
  return s;
}

// Runs `script` through `run` (a ForwardPass::Run-shaped callable); spans get
// pages [seq * 8, seq * 8 + 8) and, when `states` is non-empty, the host
// state of their sequence; state_slot is always the sequence index.
template <typename RunFn>
std::vector<std::vector<float>> Play(const Script& script, int64_t vocab,
                                     std::vector<std::vector<float>>* states,
                                     RunFn run) {
  std::vector<std::vector<int32_t>> pages(2);
  for (int s = 0; s < 2; ++s) {
    for (int p = 0; p < 8; ++p) pages[s].push_back(s * 8 + p);
  }
  int64_t pos[2] = {0, 0};
  std::vector<std::vector<float>> out;
  for (int step = 0; step < 3; ++step) {
    std::vector<SequenceSpan> spans;
    for (size_t i = 0; i < script.seq[step].size(); ++i) {
      const int s = script.seq[step][i];
      SequenceSpan span;
      span.tokens = script.tokens[step][i];
      span.start_pos = pos[s];
      span.page_table = pages[s];
      span.all_logits = script.all[step];
      span.state_slot = s;
      if (!states->empty()) span.linear_state = (*states)[s].data();
      spans.push_back(span);
      pos[s] += span.size();
    }
    std::vector<float> logits(ForwardPass::LogitRows(spans) * vocab);
    absl::Status st = run(spans, absl::MakeSpan(logits));
    EXPECT_TRUE(st.ok()) << st;
    out.push_back(std::move(logits));
  }
  return out;
}

void ExpectBitwiseEqual(const std::vector<std::vector<float>>& a,
                        const std::vector<std::vector<float>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << "step " << i;
    ASSERT_GT(a[i].size(), 0u);
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].size() * 4), 0)
        << "step " << i;
  }
}

// The reference: ForwardPass over its own storage with host states.
std::vector<std::vector<float>> Reference(const ModelWeights& w,
                                          const KvGeometry& g,
                                          const Script& script) {
  KvStorage kv(g.num_layers, g.kv_dim, g.page_size, g.num_pages);
  ThreadPool pool(2);
  auto fp = ForwardPass::Create(w, kv, pool, 64);
  EXPECT_TRUE(fp.ok()) << fp.status();
  std::vector<std::vector<float>> states;
  if (w.config.linear_state_floats() > 0) {
    states.assign(2, std::vector<float>(w.config.linear_state_floats(), 3.f));
  }
  return Play(script, w.config.vocab_size, &states,
              [&](absl::Span<const SequenceSpan> b, absl::Span<float> l) {
                return (*fp)->Run(b, l);
              });
}

TEST(CpuBackendTest, SharedStorageGivesForwardPassLogitsBitwise) {
  auto w = testing_util::TinyRandomModel(11);
  const KvGeometry g = SmallGeometry(w->config);
  const Script script = MakeScript(w->config.vocab_size);
  const auto want = Reference(*w, g, script);

  KvStorage kv(g.num_layers, g.kv_dim, g.page_size, g.num_pages);
  ThreadPool pool(2);
  auto backend = CpuBackend::Create(*w, kv, pool, 64);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->Describe(), "cpu");
  EXPECT_EQ((*backend)->max_batch_tokens(), 64);
  EXPECT_FALSE((*backend)->SamplesOnDevice());
  std::vector<std::vector<float>> no_states;
  ForwardStats stats;
  const auto got =
      Play(script, w->config.vocab_size, &no_states,
           [&](absl::Span<const SequenceSpan> b, absl::Span<float> l) {
             return (*backend)->Run(b, l, &stats);
           });
  ExpectBitwiseEqual(want, got);
  EXPECT_EQ(stats.steps, 3);
  EXPECT_EQ(stats.tokens, 11);  // 5 + 3, 1 + 1, 1
  // No device sampling: the engine must fall back to Run.
  SampledToken tok;
  DeviceSamplingParams p;
  EXPECT_EQ((*backend)
                ->RunAndSample({}, absl::MakeConstSpan(&p, 1),
                               absl::MakeSpan(&tok, 1), nullptr)
                .code(),
            absl::StatusCode::kUnimplemented);
}

TEST(CpuBackendTest, OwningModeGivesForwardPassLogitsBitwise) {
  auto w = testing_util::TinyRandomModel(12);
  const KvGeometry g = SmallGeometry(w->config);
  const Script script = MakeScript(w->config.vocab_size);
  const auto want = Reference(*w, g, script);
  auto backend = CpuBackend::CreateOwning(*w, g, 2, 64, "owned");
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->Describe(), "owned");
  std::vector<std::vector<float>> no_states;
  const auto got =
      Play(script, w->config.vocab_size, &no_states,
           [&](absl::Span<const SequenceSpan> b, absl::Span<float> l) {
             return (*backend)->Run(b, l, nullptr);
           });
  ExpectBitwiseEqual(want, got);
}

// A hybrid model: the owning backend keeps the linear-attention state by
// state_slot (what a device plugin does) and ignores host pointers.
TEST(CpuBackendTest, OwningModeKeepsHybridStateBySlot) {
  auto loaded =
      LoadModel(std::string(PDSERVE_TESTDATA_DIR) + "/hybrid/tiny_qwen35");
  if (!loaded.ok()) GTEST_SKIP() << loaded.status();
  const ModelWeights& w = **loaded;
  ASSERT_GT(w.config.linear_state_floats(), 0);
  const KvGeometry g = SmallGeometry(w.config);
  const Script script = MakeScript(w.config.vocab_size);
  const auto want = Reference(w, g, script);
  auto backend = CpuBackend::CreateOwning(w, g, 2, 64, "owned");
  ASSERT_TRUE(backend.ok()) << backend.status();
  // Garbage host states: the backend must not read them.
  std::vector<std::vector<float>> junk(
      2, std::vector<float>(w.config.linear_state_floats(), 1e30f));
  const auto got =
      Play(script, w.config.vocab_size, &junk,
           [&](absl::Span<const SequenceSpan> b, absl::Span<float> l) {
             return (*backend)->Run(b, l, nullptr);
           });
  ExpectBitwiseEqual(want, got);
  EXPECT_EQ(junk[0][0], 1e30f);

  // A slot outside [0, max_sequences) is refused.
  const int32_t tok = 3;
  const int32_t page = 0;
  SequenceSpan bad;
  bad.tokens = absl::MakeConstSpan(&tok, 1);
  bad.page_table = absl::MakeConstSpan(&page, 1);
  bad.state_slot = static_cast<int32_t>(g.max_sequences);
  std::vector<float> logits(w.config.vocab_size);
  absl::Status s = (*backend)->Run({&bad, 1}, absl::MakeSpan(logits), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("state_slot 4 is outside [0, 4)"));
}

// --- Loader -----------------------------------------------------------------

using ::pdserve::testing::EnvGuard;

const DeviceSpec kCuda0{DeviceSpec::Kind::kCuda, 0};

TEST(BackendLoaderTest, SearchOrder) {
  EXPECT_TRUE(PluginSearchPaths(DeviceSpec{}).empty());
  {
    EnvGuard env("PDSERVE_CUDA_PLUGIN", "/opt/x/libfoo.so");
    auto p = PluginSearchPaths(kCuda0);
    ASSERT_GE(p.size(), 3u);
    EXPECT_EQ(p[0], "/opt/x/libfoo.so");
    // The running binary's folder, then ../lib/pdserve next to it.
    EXPECT_THAT(p[1], HasSubstr("/tests/engine/libpdserve_cuda.so"));
    EXPECT_THAT(p[2], HasSubstr("/tests/lib/pdserve/libpdserve_cuda.so"));
  }
  {
    // A folder names the file inside it.
    EnvGuard env("PDSERVE_CUDA_PLUGIN", "/tmp");
    EXPECT_EQ(PluginSearchPaths(kCuda0)[0], "/tmp/libpdserve_cuda.so");
  }
  EnvGuard env("PDSERVE_CUDA_PLUGIN", nullptr);
  auto p = PluginSearchPaths(kCuda0);
  ASSERT_GE(p.size(), 2u);
  EXPECT_THAT(p[0], HasSubstr("/tests/engine/libpdserve_cuda.so"));
}

TEST(BackendLoaderTest, NotASharedObjectGivesDlerror) {
  const std::string path = ::testing::TempDir() + "/not_a_plugin.so";
  std::ofstream(path) << "this is text, not ELF";
  BackendOptions o;
  o.plugin_path = path;
  auto plugin = LoadBackendPlugin(kCuda0, o);
  ASSERT_FALSE(plugin.ok());
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(plugin.status().message(), HasSubstr(path + ": dlopen failed: "));
  EXPECT_THAT(plugin.status().message(), HasSubstr("tried 1 location(s)"));
}

TEST(BackendLoaderTest, LibraryWithoutEntrySymbolIsRefused) {
  auto plugin = LoadPluginFile(PDSERVE_TEST_NOT_PLUGIN);
  ASSERT_FALSE(plugin.ok());
  EXPECT_THAT(plugin.status().message(),
              HasSubstr("not a pdserve backend plugin (no symbol "
                        "pdserve_backend_plugin"));
}

TEST(BackendLoaderTest, AbiMismatchNamesBothVersions) {
  auto plugin = LoadPluginFile(PDSERVE_TEST_PLUGIN_BADABI);
  ASSERT_FALSE(plugin.ok());
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(plugin.status().message(),
              HasSubstr(absl::StrCat("plugin ABI version 999 but this pdserve "
                                     "expects ",
                                     PDSERVE_PLUGIN_ABI_VERSION)));
}

TEST(BackendLoaderTest, LayoutMismatchIsRefused) {
  auto plugin = LoadPluginFile(PDSERVE_TEST_PLUGIN_BADLAYOUT);
  ASSERT_FALSE(plugin.ok());
  EXPECT_THAT(plugin.status().message(),
              HasSubstr(absl::StrCat("type-layout fingerprint 12345 but this "
                                     "pdserve has ",
                                     PdservePluginLayoutFingerprint())));
}

TEST(BackendLoaderTest, LoadsTheTestPluginAndQueriesIt) {
  auto plugin = LoadPluginFile(PDSERVE_TEST_PLUGIN);
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_STREQ((*plugin)->name(), "test");
  EXPECT_EQ((*plugin)->path(), PDSERVE_TEST_PLUGIN);
  auto again = LoadPluginFile(PDSERVE_TEST_PLUGIN);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *plugin);  // cached

  // Through the environment, as the engine finds it.
  EnvGuard env("PDSERVE_CUDA_PLUGIN", PDSERVE_TEST_PLUGIN);
  auto info = QueryDevice(kCuda0, BackendOptions{});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name, "pdserve test plugin (cpu)");
  EXPECT_EQ(info->free_bytes, int64_t{64} << 20);
  EXPECT_EQ(info->total_bytes, int64_t{128} << 20);

  auto missing =
      QueryDevice(DeviceSpec{DeviceSpec::Kind::kCuda, 2}, BackendOptions{});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      missing.status().message(),
      HasSubstr("device test:2 (plugin " + std::string(PDSERVE_TEST_PLUGIN) +
                "): device 2 does not exist"));
}

TEST(BackendLoaderTest, NoDeviceCarriesTheDriverText) {
  EnvGuard env("PDSERVE_CUDA_PLUGIN", PDSERVE_TEST_PLUGIN);
  EnvGuard fail("PDSERVE_TEST_PLUGIN_FAIL", "1");
  auto info = QueryDevice(kCuda0, BackendOptions{});
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(info.status().message(),
              HasSubstr("no CUDA-capable device is detected"));
  EXPECT_THAT(info.status().message(), HasSubstr("[code 9]"));
}

TEST(BackendLoaderTest, CpuNeedsNoPlugin) {
  auto info = QueryDevice(DeviceSpec{}, BackendOptions{});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name, "cpu");
  EXPECT_GT(info->free_bytes, 0);
  EXPECT_EQ(LoadBackendPlugin(DeviceSpec{}, BackendOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdserve
