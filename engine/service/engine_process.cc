#include "engine/service/engine_process.h"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/backend/device_spec.h"
#include "absl/time/time.h"
#include "engine/core/engine_core.h"
#include "engine/formats/gguf.h"
#include "engine/loader/model_loader.h"
#include "engine/loader/vision_loader.h"
#include "engine/service/engine_service.h"
#include "kernels/thread_pool.h"
#include "common/process/process.h"
#include "proto/rpc_util.h"
#include "common/metrics/metrics_flags.h"
#include "common/metrics/process_metrics.h"

namespace pdserve::service {

namespace {

int Fail(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "pdserve engine: %s: %s\n", what.c_str(),
               std::string(s.message()).c_str());
  return 1;
}

absl::StatusOr<KvMemoryBudget> ParseKvMemory(const std::string& text) {
  double fraction;
  if (absl::SimpleAtod(text, &fraction) && fraction > 0 && fraction <= 1) {
    return KvMemoryBudget{.bytes = 0, .fraction = fraction};
  }
  std::string digits = text;
  int64_t scale = 1;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K':
      case 'k':
        scale = int64_t{1} << 10;
        break;
      case 'M':
      case 'm':
        scale = int64_t{1} << 20;
        break;
      case 'G':
      case 'g':
        scale = int64_t{1} << 30;
        break;
      default:
        break;
    }
    if (scale != 1) digits.pop_back();
  }
  int64_t bytes;
  if (!absl::SimpleAtoi(digits, &bytes) || bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-memory '", text,
        "' is neither a fraction in (0, 1] nor a byte count (512M, 2G)"));
  }
  return KvMemoryBudget{.bytes = bytes * scale, .fraction = 0};
}

// Starts the engine's /metrics endpoint and metric set when --metrics-port is
// given; nullopt when it is not. Unless --peak-memory-bandwidth is set, the
// peak is measured first: on a device the backend's own read probe, on the
// CPU the host copy probe. Errors: the port, the probe.
absl::StatusOr<std::optional<metrics::EngineMetricsHandle>> StartMetrics(
    const config::EngineProcessOptions& options, const std::string& model_name,
    int threads, EngineCore* core) {
  auto flags = metrics::MetricsFlagsFromOptions(options.metrics, options.host,
                                                model_name, threads);
  if (!flags.has_value()) return std::nullopt;
  if (!core->device().is_cpu()) {
    flags->device_probe = [core] {
      return core->MeasureDeviceReadBandwidth(/*buffer_bytes=*/0);
    };
  }
  auto handle = metrics::StartEngineMetrics(*flags);
  if (!handle.ok()) return handle.status();
  std::printf("pdserve engine: metrics %s (peak memory bandwidth %.3g B/s)\n",
              handle->server->url().c_str(),
              handle->metrics->peak_bandwidth_bytes_per_second());
  return std::optional<metrics::EngineMetricsHandle>(std::move(*handle));
}

GrammarVocabularyLoader& VocabularyLoader() {
  static auto* loader = new GrammarVocabularyLoader();
  return *loader;
}

// The compiler of grammar constraints over the model's vocabulary; null
// (constraints are then refused) when the vocabulary cannot be read.
std::unique_ptr<grammar::GrammarCompiler> LoadGrammarCompiler(
    const std::string& tokenizer_path, int32_t vocab_size, int64_t timeout_ms) {
  if (!VocabularyLoader()) return nullptr;
  auto vocab = VocabularyLoader()(tokenizer_path, vocab_size);
  if (!vocab.ok()) {
    std::fprintf(stderr,
                 "pdserve engine: no tokenizer in %s (%s): constrained "
                 "decoding is off\n",
                 tokenizer_path.c_str(), std::string(vocab.status().message()).c_str());
    return nullptr;
  }
  grammar::GrammarCompiler::Options o;
  o.compile_timeout = absl::Milliseconds(timeout_ms);
  auto compiler = grammar::GrammarCompiler::Create(std::move(*vocab), o);
  if (!compiler.ok()) {
    std::fprintf(stderr, "pdserve engine: constrained decoding is off: %s\n",
                 std::string(compiler.status().message()).c_str());
    return nullptr;
  }
  return std::move(*compiler);
}

}  // namespace

void SetGrammarVocabularyLoader(GrammarVocabularyLoader loader) {
  VocabularyLoader() = std::move(loader);
}

int RunEngineProcess(const config::EngineProcessOptions& flags) {
  const std::string& model_path = flags.model;
  if (model_path.empty()) {
    std::fprintf(stderr, "pdserve engine: --model PATH is required\n");
    return 2;
  }
  EngineOptions options;
  auto kv = ParseKvMemory(flags.kv_memory);
  if (!kv.ok()) return Fail("flags", kv.status());
  options.kv_memory = *kv;
  auto device = ParseDeviceSpec(flags.device);
  if (!device.ok()) return Fail("flags", device.status());
  options.device = *device;
  if (!flags.kv_dtype.empty()) {
    auto dtype = ParseKvDType(flags.kv_dtype);
    if (!dtype.ok()) return Fail("flags", dtype.status());
    options.kv_dtype = *dtype;
  }
  options.page_size = flags.page_size;
  options.max_sequences = flags.max_sequences;
  options.max_step_tokens = flags.max_step_tokens;
  options.max_seq_len = flags.max_seq_len;
  options.prefix_cache = flags.prefix_cache;
  options.max_image_pixels = flags.max_image_pixels;
  options.image_cache_bytes = flags.image_cache_bytes;
  options.kv_huge_pages = flags.kv_huge_pages;
  const int64_t threads = flags.threads > 0
                              ? flags.threads
                              : std::max<int64_t>(
                                    1, std::thread::hardware_concurrency());

  auto weights = LoadModel(model_path);
  if (!weights.ok()) return Fail("loading " + model_path, weights.status());
  if (!flags.mmproj.empty()) {
    // The placeholder ids come from the text model's vocabulary.
    auto text = GgufFile::Open(model_path);
    if (!text.ok()) return Fail("--mmproj needs a GGUF --model", text.status());
    if (absl::Status s = AttachMmproj(flags.mmproj, text->get(), **weights);
        !s.ok()) {
      return Fail("loading --mmproj " + flags.mmproj, s);
    }
  }
  std::shared_ptr<const ModelWeights> shared(std::move(*weights));
  std::string name = flags.name.empty() ? shared->config.name : flags.name;
  if (name.empty()) name = std::filesystem::path(model_path).stem().string();
  ThreadPool pool(static_cast<int>(threads));
  auto core = EngineCore::Create(shared, &pool, options);
  if (!core.ok()) {
    return Fail("creating the engine on " + options.device.ToString(),
                core.status());
  }

  EngineServiceImpl service(core->get(), name, (*core)->Describe(),
                            options.max_step_tokens);
  std::unique_ptr<grammar::GrammarCompiler> grammar = LoadGrammarCompiler(
      flags.tokenizer.empty() ? model_path : flags.tokenizer,
      static_cast<int32_t>(shared->config.vocab_size),
      std::max<int64_t>(1, flags.grammar_compile_timeout_ms));
  service.SetGrammarCompiler(grammar.get());
  service.set_shared_memory_handoff(flags.shm_handoff);
  auto server =
      rpc::StartServer(flags.host, flags.port, {&service});
  if (!server.ok()) return Fail("starting the server", server.status());
  auto metrics = StartMetrics(flags, name, pool.num_threads(), core->get());
  if (!metrics.ok()) return Fail("metrics", metrics.status());
  if (metrics->has_value()) {
    service.AttachMetrics((*metrics)->metrics.get());
    (*metrics)->server->SetReady(true);
  }
  rpc::SetServing(*server->server, {"pdserve.v1.Engine"}, true);
  const KvGeometry& g = (*core)->Geometry();
  std::printf(
      "pdserve engine: serving %s on %s:%d (%ld KV pages of %ld tokens, "
      "max-seq-len %ld, %s keys/values, %ld bytes per token) on %s\n",
      name.c_str(), flags.host.c_str(), server->port, g.num_pages,
      g.page_size, static_cast<long>((*core)->max_seq_len()),
      KvDTypeName(g.dtype), static_cast<long>(g.bytes_per_token),
      (*core)->Describe().c_str());
  std::fflush(stdout);

  process::WaitForTerminationSignal();
  rpc::SetServing(*server->server, {"pdserve.v1.Engine"}, false);
  if (metrics->has_value()) (*metrics)->server->SetReady(false);
  server->server->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::seconds(5));
  service.AttachMetrics(nullptr);  // the metrics die before the service
  return 0;
}

}  // namespace pdserve::service
