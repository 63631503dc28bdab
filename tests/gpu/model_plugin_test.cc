// The plugin file libpdserve_cuda.so (ABI table, exported symbols, errors
// without a device) and the runner's refusals: these parts run on CPU-only
// machines too. Validation of Run's inputs needs a device (skips without).
#include <dlfcn.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/backend/plugin_abi.h"
#include "gtest/gtest.h"
#include "kernels/cuda/plugin/cuda_runner.h"
#include "tests/gpu/model_gpu_test_util.h"

namespace pdserve::gpu_test {
namespace {

using cuda_runner::CreateCudaRunner;
using cuda_runner::DeviceCount;
using cuda_runner::MakeGeometry;
using cuda_runner::RunnerOptions;

const std::string kPlugin =
    std::string(PDSERVE_BINARY_DIR) + "/kernels/cuda/plugin/libpdserve_cuda.so";

TEST(CudaPluginTest, ExportsOnlyTheAbiEntry) {
  if (access(kPlugin.c_str(), R_OK) != 0) {
    GTEST_SKIP() << "plugin not built: " << kPlugin;
  }
  void* h = dlopen(kPlugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto entry = reinterpret_cast<PdservePluginEntryFn>(
      dlsym(h, PDSERVE_PLUGIN_ENTRY_SYMBOL));
  ASSERT_NE(entry, nullptr);
  const PdservePluginV1* t = entry();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->abi_version, static_cast<uint32_t>(PDSERVE_PLUGIN_ABI_VERSION));
  EXPECT_EQ(t->layout_fingerprint, PdservePluginLayoutFingerprint());
  EXPECT_STREQ(t->name, "cuda");
  EXPECT_NE(std::strstr(t->build_info, "CUDA"), nullptr) << t->build_info;
  ASSERT_NE(t->query_device, nullptr);
  ASSERT_NE(t->create_backend, nullptr);
  // The runner's own symbols stay hidden.
  EXPECT_EQ(dlsym(h, "_ZN7pdserve11cuda_runner11DeviceCountEv"), nullptr);
  EXPECT_EQ(dlsym(h,
                  "_ZN7pdserve4cuda6MatVecERKNS0_12DeviceMatrixEPKflS5_"
                  "PflP11CUstream_st"),
            nullptr);

  char err[512] = "unset";
  PdserveDeviceInfo info{};
  const int32_t code = t->query_device(0, &info, err, sizeof(err));
  if (DeviceCount() == 0) {
    EXPECT_EQ(code, 9) << err;  // FAILED_PRECONDITION
    EXPECT_GT(std::strlen(err), 0u);
    EXPECT_STRNE(err, "unset");
  } else {
    EXPECT_EQ(code, 0) << err;
    EXPECT_GT(std::strlen(info.name), 0u);
    EXPECT_GT(info.total_bytes, 0);
  }
  // Null / short arguments are INVALID_ARGUMENT, never a crash.
  ForwardBackend* b = reinterpret_cast<ForwardBackend*>(0x1);
  EXPECT_EQ(t->create_backend(nullptr, &b, err, sizeof(err)), 3) << err;
  EXPECT_EQ(b, nullptr);
  PdserveBackendArgs args{};
  args.struct_size = 4;
  EXPECT_EQ(t->create_backend(&args, &b, err, sizeof(err)), 3) << err;
  EXPECT_NE(std::strstr(err, "struct_size 4"), nullptr) << err;
  // The engine never unloads plugins; neither does this test.
}

// Through the plugin's C entry (what the engine's loader does) a backend
// gives the same logits as the runner linked directly.
TEST(CudaPluginTest, PluginBackendEqualsDirectRunner) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  if (access(kPlugin.c_str(), R_OK) != 0) GTEST_SKIP() << "plugin not built";
  auto w = LoadStories();
  if (w == nullptr) GTEST_SKIP() << "stories260K not available";
  void* h = dlopen(kPlugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto entry = reinterpret_cast<PdservePluginEntryFn>(
      dlsym(h, PDSERVE_PLUGIN_ENTRY_SYMBOL));
  ASSERT_NE(entry, nullptr);
  const KvGeometry geometry = MakeGeometry(w->config, kPageSize, 16, 2);
  PdserveBackendArgs args{};
  args.struct_size = sizeof(args);
  args.weights = w.get();
  args.geometry = &geometry;
  args.device_index = 0;
  args.max_batch_tokens = 32;
  ForwardBackend* raw = nullptr;
  char err[512] = "";
  ASSERT_EQ(entry()->create_backend(&args, &raw, err, sizeof(err)), 0) << err;
  std::unique_ptr<ForwardBackend> plugin(raw);
  auto direct = CreateCudaRunner(*w, geometry, 32, RunnerOptions{});
  ASSERT_TRUE(direct.ok()) << direct.status();
  const int64_t vocab = w->config.vocab_size;
  const std::vector<int32_t> tokens = {1, 40, 41, 300, 7};
  const std::vector<int32_t> pages = Pages(0, 2);
  SequenceSpan s;
  s.tokens = tokens;
  s.page_table = pages;
  std::vector<float> a(vocab), b(vocab);
  ForwardStats sa, sb;
  ASSERT_TRUE(plugin->Run({&s, 1}, absl::MakeSpan(a), &sa).ok());
  ASSERT_TRUE((*direct)->Run({&s, 1}, absl::MakeSpan(b), &sb).ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(sa.flops, sb.flops);
  EXPECT_TRUE(plugin->SamplesOnDevice());
  // Device sampling with a temperature: reproducible for a (seed, step),
  // the token among the top_k of the logits, logprob <= 0.
  DeviceSamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 5;
  p.seed = 42;
  p.step = 3;
  SampledToken t1, t2;
  ASSERT_TRUE(plugin->RunAndSample({&s, 1}, {&p, 1}, {&t1, 1}, nullptr).ok());
  ASSERT_TRUE(plugin->RunAndSample({&s, 1}, {&p, 1}, {&t2, 1}, nullptr).ok());
  EXPECT_EQ(t1.token, t2.token);
  EXPECT_FLOAT_EQ(t1.logprob, t2.logprob);
  EXPECT_LE(t1.logprob, 0.0f);
  ASSERT_GE(t1.token, 0);
  ASSERT_LT(t1.token, vocab);
  int above = 0;
  for (int64_t v = 0; v < vocab; ++v) above += a[v] > a[t1.token];
  EXPECT_LT(above, 5);
}

ModelWeights FakeModel(int64_t layers) {
  ModelWeights w;
  ModelConfig& c = w.config;
  c.name = "fake";
  c.vocab_size = 32;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_layers = layers;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.rope_dims = 16;
  w.layers.resize(layers);
  return w;
}

TEST(CudaPluginTest, MoeAndHybridModelsAreUnimplemented) {
  ModelWeights moe = FakeModel(2);
  moe.config.arch = Architecture::kQwen3Moe;
  moe.config.num_experts = 8;
  moe.config.num_experts_used = 2;
  auto r = CreateCudaRunner(moe, MakeGeometry(moe.config, 16, 4, 1), 8,
                            RunnerOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("mixture-of-experts"),
            absl::string_view::npos)
      << r.status();

  ModelWeights hybrid = FakeModel(4);
  hybrid.config.arch = Architecture::kQwen35;
  hybrid.config.linear_layers = {true, true, true, false};
  r = CreateCudaRunner(hybrid, MakeGeometry(hybrid.config, 16, 4, 1), 8,
                       RunnerOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("Gated DeltaNet"),
            absl::string_view::npos)
      << r.status();
}

TEST(CudaPluginTest, GeometryMismatchIsInvalidArgument) {
  ModelWeights w = FakeModel(2);
  ModelConfig other = w.config;
  other.num_kv_heads = 4;  // kv_dim 64 instead of 32
  auto r =
      CreateCudaRunner(w, MakeGeometry(other, 16, 4, 1), 8, RunnerOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("kv_dim 64"), absl::string_view::npos)
      << r.status();
}

TEST(CudaPluginTest, RunValidatesLikeForwardPass) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  auto w = LoadStories();
  if (w == nullptr) GTEST_SKIP() << "stories260K not available";
  auto r = CreateCudaRunner(*w, MakeGeometry(w->config, kPageSize, 8, 2), 16,
                            RunnerOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  ForwardBackend& b = **r;
  const int64_t vocab = w->config.vocab_size;
  std::vector<float> logits(2 * vocab);
  const std::vector<int32_t> pages = Pages(0, 2);
  std::vector<int32_t> tokens = {1, 2, 3};
  SequenceSpan s;
  s.tokens = tokens;
  s.page_table = pages;
  EXPECT_TRUE(b.Run({&s, 1}, absl::MakeSpan(logits), nullptr).ok());
  auto expect_invalid = [&](const SequenceSpan& span, size_t logit_floats,
                            const char* needle) {
    absl::Status st =
        b.Run({&span, 1}, absl::MakeSpan(logits.data(), logit_floats), nullptr);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(needle), absl::string_view::npos) << st;
  };
  std::vector<int32_t> bad = {1, static_cast<int32_t>(vocab)};
  SequenceSpan t = s;
  t.tokens = bad;
  expect_invalid(t, logits.size(), "outside the vocabulary [0, 512)");
  t = s;
  const std::vector<int32_t> far_page = {0, 8};
  t.page_table = far_page;
  t.start_pos = 20;  // positions up to 23: pages 0 and 1
  expect_invalid(t, logits.size(), "is page 8, outside the storage's 8 pages");
  t = s;
  t.start_pos = 100;
  expect_invalid(t, logits.size(), "page table has 2 pages");
  std::vector<int32_t> many(17, 1);
  t = s;
  t.tokens = many;
  t.page_table = pages;
  expect_invalid(t, logits.size(), "more than max_batch_tokens 16");
  expect_invalid(s, vocab - 1, "need 512");
  EXPECT_EQ(b.max_batch_tokens(), 16);
  EXPECT_EQ(b.max_positions(), 128);  // 8 pages of 16 < context 512
  EXPECT_NE(b.Describe().find("cuda:0"), std::string::npos) << b.Describe();
}

}  // namespace
}  // namespace pdserve::gpu_test
