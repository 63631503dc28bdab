// A backend plugin for tests: implements engine/backend/plugin_abi.h the way
// the CUDA plugin does (own KV storage and state slots for the geometry,
// state by SequenceSpan::state_slot, device-side sampling), on the CPU, so
// the dlopen() route is exercised end to end on machines without a GPU.
//
// Environment (read on each call): PDSERVE_TEST_PLUGIN_FAIL=1 makes
// query_device and create_backend fail the way a CUDA plugin without a
// driver does; PDSERVE_TEST_PLUGIN_NO_SAMPLING=1 makes RunAndSample answer
// UNIMPLEMENTED (before running anything). Compile with
// PDSERVE_TEST_PLUGIN_ABI=N (or PDSERVE_TEST_PLUGIN_FINGERPRINT=N) to export
// that ABI version (layout fingerprint) instead of this build's: the loader
// must refuse it.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/plugin_abi.h"
#include "engine/model/forward.h"
#include "engine/model/sampler.h"

#ifndef PDSERVE_TEST_PLUGIN_ABI
#define PDSERVE_TEST_PLUGIN_ABI PDSERVE_PLUGIN_ABI_VERSION
#endif
#ifndef PDSERVE_TEST_PLUGIN_FINGERPRINT
#define PDSERVE_TEST_PLUGIN_FINGERPRINT PdservePluginLayoutFingerprint()
#endif

namespace pdserve {
namespace {

// What the plugin reports as the device's memory (a fractional KV budget is
// taken of free_bytes).
constexpr int64_t kFreeBytes = int64_t{64} << 20;
constexpr int64_t kTotalBytes = int64_t{128} << 20;
// What its MeasureReadBandwidth reports (tests expect this number).
constexpr double kTestPluginReadBandwidth = 3.25e12;
constexpr char kNoDevice[] =
    "cudaGetDeviceCount: no CUDA-capable device is detected "
    "(cudaErrorNoDevice, simulated by the test plugin)";

bool EnvIs1(const char* name) {
  const char* f = std::getenv(name);
  return f != nullptr && std::strcmp(f, "1") == 0;
}

bool Failing() { return EnvIs1("PDSERVE_TEST_PLUGIN_FAIL"); }

void Copy(const std::string& text, char* out, size_t size) {
  if (size == 0) return;
  std::snprintf(out, size, "%s", text.c_str());
}

// The CPU backend in owning mode plus "device" sampling: a fresh Sampler per
// draw seeded from (seed, step), a deterministic function of them and the
// logits, as the plugin ABI asks of a device sampler.
class TestPluginBackend : public ForwardBackend {
 public:
  TestPluginBackend(std::unique_ptr<CpuBackend> cpu, int64_t vocab,
                    int32_t device_index)
      : cpu_(std::move(cpu)), vocab_(vocab), index_(device_index) {}

  std::string Describe() const override {
    return absl::StrCat("test-plugin:", index_, " (", cpu_->Describe(), ")");
  }
  int64_t max_batch_tokens() const override { return cpu_->max_batch_tokens(); }
  int64_t max_positions() const override { return cpu_->max_positions(); }
  absl::Status Run(absl::Span<const SequenceSpan> batch,
                   absl::Span<float> logits, ForwardStats* stats) override {
    return cpu_->Run(batch, logits, stats);
  }
  bool SamplesOnDevice() const override { return true; }
  // A "device" of kTestPluginReadBandwidth bytes/s, or the probe failing
  // with PDSERVE_TEST_PLUGIN_NO_PROBE=1; a buffer size is echoed in the
  // error so tests see it was passed through.
  absl::StatusOr<double> MeasureReadBandwidth(int64_t buffer_bytes) override {
    if (EnvIs1("PDSERVE_TEST_PLUGIN_NO_PROBE")) {
      return absl::InternalError(absl::StrCat(
          "test plugin: probe of ", buffer_bytes, " bytes switched off"));
    }
    return kTestPluginReadBandwidth;
  }
  absl::Status RunAndSample(absl::Span<const SequenceSpan> batch,
                            absl::Span<const DeviceSamplingParams> params,
                            absl::Span<SampledToken> tokens,
                            ForwardStats* stats) override {
    if (EnvIs1("PDSERVE_TEST_PLUGIN_NO_SAMPLING")) {
      return absl::UnimplementedError("test plugin: sampling switched off");
    }
    if (params.size() != batch.size() || tokens.size() != batch.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RunAndSample: ", batch.size(), " spans, ", params.size(),
          " params, ", tokens.size(), " token slots"));
    }
    const int64_t rows = ForwardPass::LogitRows(batch);
    logits_.resize(static_cast<size_t>(rows * vocab_));
    if (absl::Status s = cpu_->Run(batch, absl::MakeSpan(logits_), stats);
        !s.ok()) {
      return s;
    }
    int64_t row = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      row += batch[i].logit_rows();  // the span's last row is row - 1
      SamplingParams p;
      p.temperature = params[i].temperature;
      p.top_k = params[i].top_k;
      p.top_p = params[i].top_p;
      p.min_p = params[i].min_p;
      p.seed = params[i].seed * 0x9E3779B97F4A7C15ull + params[i].step;
      absl::StatusOr<std::unique_ptr<Sampler>> sampler =
          Sampler::Create(p, vocab_);
      if (!sampler.ok()) return sampler.status();
      absl::StatusOr<SampledToken> t = (*sampler)->Sample(absl::MakeConstSpan(
          logits_.data() + (row - 1) * vocab_, static_cast<size_t>(vocab_)));
      if (!t.ok()) return t.status();
      tokens[i] = *t;
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<CpuBackend> cpu_;
  const int64_t vocab_;
  const int32_t index_;
  std::vector<float> logits_;
};

int32_t QueryDevice(int32_t device_index, PdserveDeviceInfo* info, char* error,
                    size_t error_size) {
  if (Failing()) {
    Copy(kNoDevice, error, error_size);
    return static_cast<int32_t>(absl::StatusCode::kFailedPrecondition);
  }
  if (device_index != 0) {
    Copy(absl::StrCat("device ", device_index,
                      " does not exist; the test plugin has 1 device"),
         error, error_size);
    return static_cast<int32_t>(absl::StatusCode::kFailedPrecondition);
  }
  info->free_bytes = kFreeBytes;
  info->total_bytes = kTotalBytes;
  info->compute_major = 0;
  info->compute_minor = 0;
  Copy("pdserve test plugin (cpu)", info->name, sizeof(info->name));
  return 0;
}

int32_t CreateBackend(const PdserveBackendArgs* args, ForwardBackend** backend,
                      char* error, size_t error_size) {
  *backend = nullptr;
  if (Failing()) {
    Copy(kNoDevice, error, error_size);
    return static_cast<int32_t>(absl::StatusCode::kFailedPrecondition);
  }
  if (args->struct_size < sizeof(PdserveBackendArgs)) {
    Copy(absl::StrCat("args struct of ", args->struct_size, " bytes, want ",
                      sizeof(PdserveBackendArgs)),
         error, error_size);
    return static_cast<int32_t>(absl::StatusCode::kInvalidArgument);
  }
  const int threads = args->num_threads > 0 ? args->num_threads : 1;
  absl::StatusOr<std::unique_ptr<CpuBackend>> cpu =
      CpuBackend::CreateOwning(*args->weights, *args->geometry, threads,
                               args->max_batch_tokens, "cpu, owned storage");
  if (!cpu.ok()) {
    Copy(std::string(cpu.status().message()), error, error_size);
    return static_cast<int32_t>(cpu.status().code());
  }
  *backend = new TestPluginBackend(
      std::move(*cpu), args->weights->config.vocab_size, args->device_index);
  return 0;
}

const PdservePluginV1 kTable = {
    PDSERVE_TEST_PLUGIN_ABI,
    PDSERVE_TEST_PLUGIN_FINGERPRINT,
    "test",
    "tests/engine/backend_test_plugin.cc",
    &QueryDevice,
    &CreateBackend,
};

}  // namespace
}  // namespace pdserve

extern "C" PDSERVE_PLUGIN_EXPORT const PdservePluginV1* pdserve_backend_plugin(
    void) {
  return &pdserve::kTable;
}
