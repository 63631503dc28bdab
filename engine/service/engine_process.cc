#include "engine/service/engine_process.h"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/backend/device_spec.h"
#include "engine/core/engine_core.h"
#include "engine/loader/model_loader.h"
#include "engine/service/engine_service.h"
#include "kernels/thread_pool.h"
#include "proto/rpc_util.h"
#include "server/metrics/metrics_flags.h"
#include "server/metrics/process_metrics.h"

namespace pdserve::service {

const std::vector<cli::FlagSpec>& EngineFlags() {
  static const auto* flags = [] {
    auto* f = new std::vector<cli::FlagSpec>{
        {"model", true,
         "model file or folder (GGUF, safetensors, llama2.c .bin)"},
        {"host", true, "interface to listen on (default 127.0.0.1)"},
        {"port", true, "gRPC port (default 50053; 0 = any free port)"},
        {"threads", true, "compute threads (default: all cores)"},
        {"device", true,
         "where the model runs: cpu (default), cuda or cuda:N (loads "
         "libpdserve_cuda.so)"},
        {"kv-memory", true,
         "KV pool budget: a fraction of free memory (0.5) or bytes with K/M/G "
         "suffix"},
        {"page-size", true, "tokens per KV page (default 16)"},
        {"max-sequences", true, "sequences live at once (default 256)"},
        {"max-step-tokens", true,
         "most tokens one step processes (default 2048)"},
        {"no-prefix-cache", false,
         "turn off automatic prefix caching (on by default for dense models on "
         "the CPU: prompts reuse the KV pages of a prefix already computed)"},
        {"name", true, "model name to report (default: from the file)"},
        {"config", true, "JSON config file (section \"engine\")"},
    };
    metrics::AppendMetricsFlags(*f, /*engine=*/true);
    return f;
  }();
  return *flags;
}

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
// given (the copy probe runs first unless --peak-memory-bandwidth is set);
// nullopt when it is not. Errors: bad flags, the port, the probe.
absl::StatusOr<std::optional<metrics::EngineMetricsHandle>> StartMetrics(
    const cli::CliArgs& args, const std::string& model_name, int threads) {
  auto flags = metrics::MetricsFlagsFromArgs(args, model_name, threads);
  if (!flags.ok()) return flags.status();
  if (!flags->has_value()) return std::nullopt;
  auto handle = metrics::StartEngineMetrics(**flags);
  if (!handle.ok()) return handle.status();
  std::printf("pdserve engine: metrics %s (peak memory bandwidth %.3g B/s)\n",
              handle->server->url().c_str(),
              handle->metrics->peak_bandwidth_bytes_per_second());
  return std::optional<metrics::EngineMetricsHandle>(std::move(*handle));
}

}  // namespace

int RunEngineProcess(const cli::CliArgs& args) {
  const std::string model_path = args.String("model", "");
  if (model_path.empty()) {
    std::fprintf(stderr, "pdserve engine: --model PATH is required\n");
    return 2;
  }
  EngineOptions options;
  auto kv = ParseKvMemory(args.String("kv-memory", "0.5"));
  if (!kv.ok()) return Fail("flags", kv.status());
  options.kv_memory = *kv;
  auto device = ParseDeviceSpec(args.String("device", "cpu"));
  if (!device.ok()) return Fail("flags", device.status());
  options.device = *device;
  auto port = args.Int("port", 50053);
  auto threads = args.Int("threads", std::thread::hardware_concurrency());
  auto page = args.Int("page-size", 16);
  auto max_seqs = args.Int("max-sequences", 256);
  auto max_step = args.Int("max-step-tokens", 2048);
  for (const auto* v : {&port, &threads, &page, &max_seqs, &max_step}) {
    if (!v->ok()) return Fail("flags", v->status());
  }
  if (absl::Status s = rpc::CheckPort(*port); !s.ok()) return Fail("flags", s);
  options.page_size = *page;
  options.max_sequences = *max_seqs;
  options.max_step_tokens = *max_step;
  options.prefix_cache = !args.Bool("no-prefix-cache");

  auto weights = LoadModel(model_path);
  if (!weights.ok()) return Fail("loading " + model_path, weights.status());
  std::shared_ptr<const ModelWeights> shared(std::move(*weights));
  std::string name = args.String("name", shared->config.name);
  if (name.empty()) name = std::filesystem::path(model_path).stem().string();
  ThreadPool pool(static_cast<int>(std::max<int64_t>(1, *threads)));
  auto core = EngineCore::Create(shared, &pool, options);
  if (!core.ok()) {
    return Fail("creating the engine on " + options.device.ToString(),
                core.status());
  }

  EngineServiceImpl service(core->get(), name, (*core)->Describe(),
                            options.max_step_tokens);
  auto server =
      rpc::StartServer(args.String("host", "127.0.0.1"), *port, {&service});
  if (!server.ok()) return Fail("starting the server", server.status());
  auto metrics = StartMetrics(args, name, pool.num_threads());
  if (!metrics.ok()) return Fail("metrics", metrics.status());
  if (metrics->has_value()) {
    service.AttachMetrics((*metrics)->metrics.get());
    (*metrics)->server->SetReady(true);
  }
  rpc::SetServing(*server->server, {"pdserve.v1.Engine"}, true);
  const KvGeometry& g = (*core)->Geometry();
  std::printf(
      "pdserve engine: serving %s on %s:%d (%ld KV pages of %ld tokens) on "
      "%s\n",
      name.c_str(), args.String("host", "127.0.0.1").c_str(), server->port,
      g.num_pages, g.page_size, (*core)->Describe().c_str());
  std::fflush(stdout);

  rpc::WaitForTerminationSignal();
  rpc::SetServing(*server->server, {"pdserve.v1.Engine"}, false);
  if (metrics->has_value()) (*metrics)->server->SetReady(false);
  server->server->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::seconds(5));
  service.AttachMetrics(nullptr);  // the metrics die before the service
  return 0;
}

}  // namespace pdserve::service
