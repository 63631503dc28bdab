// `pdserve frontend`: the public API process.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "proto/rpc_util.h"
#include "server/frontend/frontend_service.h"
#include "server/frontend/api_types.h"
#include "server/frontend/http_api.h"
#include "server/http/http_server.h"
#include "server/metrics/metrics_flags.h"
#include "server/metrics/process_metrics.h"

namespace pdserve::frontend {

const std::vector<cli::FlagSpec>& FrontendFlags() {
  static const auto* flags = [] {
    auto* f = new std::vector<cli::FlagSpec>{
      {"model", true, "model file (its vocabulary and chat template are used)"},
      {"tokenizer", true, "tokenizer file when the model has none inside (llama2.c tokenizer.bin, tokenizer.json)"},
      {"scheduler", true, "scheduler address (default 127.0.0.1:50052)"},
      {"host", true, "interface to listen on (default 127.0.0.1)"},
      {"port", true, "public gRPC port (default 50051; 0 = any free port)"},
      {"served-model-name", true, "model name the APIs serve and check (default: the model file's stem)"},
      {"name", true, "the same as --served-model-name (older name)"},
      {"http-port", true, "OpenAI/Anthropic-compatible HTTP API port (default 8000; 0 = off)"},
      {"http-threads", true, "HTTP API IO threads (default 2)"},
      {"http-max-body", true, "largest HTTP request body in bytes; larger ones get 413 (default 8388608)"},
      {"api-key", true, "HTTP API keys, comma-separated (Authorization: Bearer KEY); default: none required"},
      {"api-key-file", true, "file of HTTP API keys, one a line"},
      {"drain-seconds", true, "on SIGTERM, how long open streams may finish (default 30)"},
      {"config", true, "JSON config file (section \"frontend\")"},
    };
    metrics::AppendMetricsFlags(*f, /*engine=*/false);
    return f;
  }();
  return *flags;
}

namespace {

const std::vector<std::string> kServices = {"pdserve.v1.Inference"};

// Polls the scheduler until it reports a ready engine; fills name/capacity.
bool WaitForScheduler(const std::string& target, v1::SchedulerStatus* status,
                      int seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    // A fresh channel per attempt avoids reconnect backoff while it starts.
    auto stub = v1::Scheduler::NewStub(rpc::MakeChannel(target));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(500));
    if (stub->GetStatus(&ctx, v1::GetStatusRequest(), status).ok() &&
        status->engine_ready()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}


// Each open HTTP stream holds a socket: lift the soft descriptor limit to
// the hard one.
void RaiseFileLimit() {
  rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &lim);
  }
}

struct HttpFlags {
  int64_t port = 8000, threads = 2, max_body = 8 << 20;
  std::vector<std::string> api_keys;
};

absl::StatusOr<HttpFlags> ParseHttpFlags(const cli::CliArgs& args) {
  HttpFlags f;
  auto port = args.Int("http-port", f.port);
  auto threads = args.Int("http-threads", f.threads);
  auto max_body = args.Int("http-max-body", f.max_body);
  for (const auto* v : {&port, &threads, &max_body}) {
    if (!v->ok()) return v->status();
  }
  if (absl::Status s = rpc::CheckPort(*port); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--http-port: ", s.message()));
  }
  if (*threads < 1 || *threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http-threads ", *threads, " must be in [1, 256]"));
  }
  if (*max_body < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http-max-body ", *max_body, " must be >= 1"));
  }
  auto keys = LoadApiKeys(args.String("api-key", ""),
                          args.String("api-key-file", ""));
  if (!keys.ok()) return keys.status();
  f.port = *port;
  f.threads = *threads;
  f.max_body = *max_body;
  f.api_keys = std::move(*keys);
  return f;
}

}  // namespace

int RunFrontendProcess(const cli::CliArgs& args) {
  std::string tokenizer_path = args.String("tokenizer", args.String("model", ""));
  if (tokenizer_path.empty()) {
    std::fprintf(stderr, "pdserve frontend: --model or --tokenizer is required\n");
    return 2;
  }
  auto port = args.Int("port", 50051);
  auto drain = args.Int("drain-seconds", 30);
  if (!port.ok() || !drain.ok()) {
    std::fprintf(stderr, "pdserve frontend: %s\n",
                 std::string((port.ok() ? drain : port).status().message()).c_str());
    return 2;
  }
  if (absl::Status s = rpc::CheckPort(*port); !s.ok()) {
    std::fprintf(stderr, "pdserve frontend: %s\n",
                 std::string(s.message()).c_str());
    return 2;
  }
  auto http_flags = ParseHttpFlags(args);
  if (!http_flags.ok()) {
    std::fprintf(stderr, "pdserve frontend: %s\n",
                 std::string(http_flags.status().message()).c_str());
    return 2;
  }
  const std::string scheduler_addr = args.String("scheduler", "127.0.0.1:50052");
  auto stub = v1::Scheduler::NewStub(rpc::MakeChannel(scheduler_addr));
  v1::SchedulerStatus status;
  if (!WaitForScheduler(scheduler_addr, &status, 600)) {
    std::fprintf(stderr, "pdserve frontend: scheduler %s not ready\n",
                 scheduler_addr.c_str());
    return 1;
  }
  const std::string name = args.String(
      "served-model-name",
      args.String("name", DefaultServedModelName(args.String(
                              "model", tokenizer_path))));
  auto model = LoadModelContext(tokenizer_path, name);
  if (!model.ok()) {
    std::fprintf(stderr, "pdserve frontend: loading tokenizer %s: %s\n",
                 tokenizer_path.c_str(),
                 std::string(model.status().message()).c_str());
    return 1;
  }
  (*model)->max_seq_len = status.max_seq_len();
  auto metrics_flags = metrics::MetricsFlagsFromArgs(args, name);
  if (!metrics_flags.ok()) {
    std::fprintf(stderr, "pdserve frontend: %s\n",
                 std::string(metrics_flags.status().message()).c_str());
    return 2;
  }
  std::optional<metrics::FrontendMetricsHandle> metrics;
  if (metrics_flags->has_value()) {
    auto handle = metrics::StartFrontendMetrics(**metrics_flags);
    if (!handle.ok()) {
      std::fprintf(stderr, "pdserve frontend: metrics: %s\n",
                   std::string(handle.status().message()).c_str());
      return 1;
    }
    metrics = std::move(*handle);
    std::printf("pdserve frontend: metrics %s\n",
                metrics->server->url().c_str());
  }
  metrics::MetricsServer* metrics_server =
      metrics ? metrics->server.get() : nullptr;
  InferenceServiceImpl service(model->get(), stub.get(),
                               metrics ? metrics->metrics.get() : nullptr);
  const std::string host = args.String("host", "127.0.0.1");
  auto server = rpc::StartServer(host, *port, {&service});
  if (!server.ok()) {
    std::fprintf(stderr, "pdserve frontend: %s\n",
                 std::string(server.status().message()).c_str());
    return 1;
  }
  grpc::Server* srv = server->server.get();
  HttpApiOptions http_options;
  http_options.api_keys = http_flags->api_keys;
  HttpApi http_api(service.generation_context(), http_options);
  std::unique_ptr<http::Server> http_server;
  if (http_flags->port > 0) {
    RaiseFileLimit();
    http::ServerOptions o;
    o.host = host;
    o.port = static_cast<int>(http_flags->port);
    o.threads = static_cast<int>(http_flags->threads);
    o.max_body_bytes = http_flags->max_body;
    o.error_body = [](int status, const std::string& message) {
      ApiError e;
      e.status = status;
      e.message = message;
      return std::make_pair(std::string("application/json"),
                            DumpJson(OpenAiErrorBody(e)));
    };
    auto started = http::Server::Start(
        o, [&http_api](http::Request r, std::shared_ptr<http::ResponseWriter> w) {
          http_api.Handle(std::move(r), std::move(w));
        });
    if (!started.ok()) {
      std::fprintf(stderr, "pdserve frontend: %s\n",
                   std::string(started.status().message()).c_str());
      return 1;
    }
    http_server = std::move(*started);
  }
  rpc::SetServing(*srv, kServices, true);
  http_api.SetReady(true);
  if (metrics_server) metrics_server->SetReady(true);
  std::printf("pdserve frontend: serving %s on %s:%d (capacity %d tokens)\n",
              name.c_str(), host.c_str(), server->port, status.max_seq_len());
  if (http_server != nullptr) {
    std::printf("pdserve frontend: HTTP API on http://%s:%d/v1%s\n",
                host.c_str(), http_server->port(),
                http_flags->api_keys.empty() ? "" : " (API keys required)");
  }
  std::fflush(stdout);

  // Health follows the scheduler's view of the engine.
  std::atomic<bool> stop{false};
  std::thread watcher([&] {
    bool serving = true;
    while (!stop) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(500));
      v1::SchedulerStatus s;
      const bool ok = stub->GetStatus(&ctx, v1::GetStatusRequest(), &s).ok() &&
                      s.engine_ready();
      if (ok != serving && !stop) {
        serving = ok;
        rpc::SetServing(*srv, kServices, ok);
        http_api.SetReady(ok);
        if (metrics_server) metrics_server->SetReady(ok);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });

  rpc::WaitForTerminationSignal();
  // Drain: refuse new requests at once (before the health watcher, which may
  // sit in a 500 ms status call, is joined), let open streams finish.
  service.SetDraining(true);
  http_api.SetDraining(true);
  stop = true;
  rpc::SetServing(*srv, kServices, false);
  watcher.join();
  rpc::SetServing(*srv, kServices, false);  // the watcher may have raced us
  if (metrics_server) metrics_server->SetReady(false);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(*drain);
  while ((service.active_streams() > 0 || http_api.active() > 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (http_server != nullptr) http_server->Stop();
  srv->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}

}  // namespace pdserve::frontend
