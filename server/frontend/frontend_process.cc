// `pdserve frontend`: the public API process.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/process/process.h"
#include "engine/formats/gguf.h"
#include "engine/loader/model_loader.h"
#include "engine/loader/vision_loader.h"
#include "proto/rpc_util.h"
#include "server/frontend/frontend_service.h"
#include "server/frontend/generation_stream.h"
#include "server/frontend/api_types.h"
#include "server/frontend/http_api.h"
#include "server/http/http_server.h"
#include "common/metrics/metrics_flags.h"
#include "common/metrics/process_metrics.h"

namespace pdserve::frontend {

namespace {

const std::vector<std::string> kServices = {"pdserve.v1.Inference"};

// Each open HTTP stream holds a socket: lift the soft descriptor limit to
// the hard one.
void RaiseFileLimit() {
  rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &lim);
  }
}

// The vision tower's config (placeholder ids, processor sizes) of a
// vision-language model: from --mmproj (ids from the vocabulary), else from
// the model's own config (a safetensors checkpoint's vision_config). A
// model whose config cannot be read serves text.
absl::Status LoadVision(const config::FrontendProcessOptions& flags,
                        ModelContext& model) {
  model.image_limits = {flags.max_image_bytes, flags.max_image_pixels,
                        flags.max_images};
  if (!flags.mmproj.empty()) {
    auto f = GgufFile::Open(flags.mmproj);
    if (!f.ok()) return f.status();
    auto v = VisionConfigFromMmproj(**f);
    if (!v.ok()) return v.status();
    const Tokenizer& t = *model.tokenizer;
    for (auto [text, id] :
         {std::pair{"<|image_pad|>", &v->image_token_id},
          std::pair{"<|vision_start|>", &v->vision_start_token_id},
          std::pair{"<|vision_end|>", &v->vision_end_token_id}}) {
      *id = t.FindToken(text);
      if (*id < 0) {
        return absl::NotFoundError(absl::StrCat(
            "--mmproj: the vocabulary has no ", text, " token"));
      }
    }
    model.vision = *v;
    return absl::OkStatus();
  }
  if (flags.model.empty()) return absl::OkStatus();
  auto c = ReadModelConfig(flags.model);
  if (c.ok()) model.vision = c->vision;
  return absl::OkStatus();
}

}  // namespace

int RunFrontendProcess(const config::FrontendProcessOptions& flags) {
  const std::string tokenizer_path =
      flags.tokenizer.empty() ? flags.model : flags.tokenizer;
  if (tokenizer_path.empty()) {
    std::fprintf(stderr, "pdserve frontend: --model or --tokenizer is required\n");
    return 2;
  }
  auto api_keys = LoadApiKeys(flags.api_key, flags.api_key_file);
  if (!api_keys.ok()) {
    std::fprintf(stderr, "pdserve frontend: %s\n",
                 std::string(api_keys.status().message()).c_str());
    return 2;
  }
  CellRouter::Options router_options;
  router_options.on_engine_lost = [](const std::string& target) {
    const int moved = GenerationStream::MoveOffCell(target);
    if (moved > 0) {
      std::fprintf(stderr,
                   "pdserve frontend: the engine of cell %s was lost; moved "
                   "its %d streams to the other cells\n",
                   target.c_str(), moved);
    }
  };
  auto router =
      CellRouter::Create(SplitTargets(flags.scheduler), router_options);
  if (!router.ok()) {
    std::fprintf(stderr, "pdserve frontend: %s\n",
                 std::string(router.status().message()).c_str());
    return 2;
  }
  CellRouter& cells = **router;
  // Every cell of a static list must come up once; with a dns source, at
  // least one. Later a cell that goes away is skipped by the router until
  // it is back (or, from dns, leaves it).
  if (!cells.WaitUntilReady(/*all=*/!cells.has_dns_source(), 600)) {
    std::fprintf(stderr, "pdserve frontend: no ready scheduler at %s\n",
                 flags.scheduler.c_str());
    return 1;
  }
  const int64_t start_capacity = cells.ReadyCapacity();
  cells.Start();
  if (cells.Targets().size() > 1 || cells.has_dns_source()) {
    std::printf("pdserve frontend: routing over %zu cells (%s)\n",
                cells.Targets().size(), flags.scheduler.c_str());
  }
  const std::string name =
      !flags.served_model_name.empty() ? flags.served_model_name
      : !flags.name.empty()
          ? flags.name
          : DefaultServedModelName(flags.model.empty() ? tokenizer_path
                                                       : flags.model);
  ModelContextOptions model_options;
  if (!flags.tool_call_parser.empty()) {
    auto f = ParseToolCallFormat(flags.tool_call_parser);
    if (!f.ok()) {
      std::fprintf(stderr, "pdserve frontend: --tool-call-parser: %s\n",
                   std::string(f.status().message()).c_str());
      return 2;
    }
    model_options.tool_format = *f;
  }
  if (!flags.reasoning_parser.empty()) {
    auto f = ParseReasoningFormat(flags.reasoning_parser);
    if (!f.ok()) {
      std::fprintf(stderr, "pdserve frontend: --reasoning-parser: %s\n",
                   std::string(f.status().message()).c_str());
      return 2;
    }
    model_options.reasoning_format = *f;
  }
  model_options.grammar_compile_timeout_ms =
      std::max<int64_t>(1, flags.grammar_compile_timeout_ms);
  auto model = LoadModelContext(tokenizer_path, name, model_options);
  if (!model.ok()) {
    std::fprintf(stderr, "pdserve frontend: loading tokenizer %s: %s\n",
                 tokenizer_path.c_str(),
                 std::string(model.status().message()).c_str());
    return 1;
  }
  (*model)->max_seq_len = start_capacity;
  if (absl::Status s = LoadVision(flags, **model); !s.ok()) {
    std::fprintf(stderr, "pdserve frontend: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  auto metrics_flags =
      metrics::MetricsFlagsFromOptions(flags.metrics, flags.host, name);
  std::optional<metrics::FrontendMetricsHandle> metrics;
  if (metrics_flags.has_value()) {
    auto handle = metrics::StartFrontendMetrics(*metrics_flags);
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
  InferenceServiceImpl service(model->get(), &cells,
                               metrics ? metrics->metrics.get() : nullptr);
  service.set_scheduler_recovery(std::chrono::milliseconds(
      static_cast<int64_t>(flags.scheduler_recovery_s * 1000.0)));
  service.set_pd_min_prompt_tokens(flags.pd_min_prompt_tokens);
  const std::string& host = flags.host;
  auto server = rpc::StartServer(host, flags.port, {&service});
  if (!server.ok()) {
    std::fprintf(stderr, "pdserve frontend: %s\n",
                 std::string(server.status().message()).c_str());
    return 1;
  }
  grpc::Server* srv = server->server.get();
  HttpApiOptions http_options;
  http_options.api_keys = *api_keys;
  HttpApi http_api(service.generation_context(), http_options);
  std::unique_ptr<http::Server> http_server;
  if (flags.http_port > 0) {
    RaiseFileLimit();
    http::ServerOptions o;
    o.host = host;
    o.port = static_cast<int>(flags.http_port);
    o.threads = static_cast<int>(flags.http_threads);
    o.max_body_bytes = flags.http_max_body;
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
              name.c_str(), host.c_str(), server->port, static_cast<int>(start_capacity));
  if (http_server != nullptr) {
    std::printf("pdserve frontend: HTTP API on http://%s:%d/v1%s\n",
                host.c_str(), http_server->port(),
                api_keys->empty() ? "" : " (API keys required)");
  }
  std::fflush(stdout);

  // Health follows the scheduler's view of the engine, and so does the
  // capacity: an engine that restarted with another --max-seq-len is
  // enforced from the first status that reports it, before serving resumes.
  std::atomic<bool> stop{false};
  ModelContext* context = model->get();
  std::thread watcher([&] {
    bool serving = true;
    while (!stop) {
      // Serving while any cell is; the capacity is the smallest of the
      // ready cells' (a request must fit wherever it is routed).
      const int64_t capacity = cells.ReadyCapacity();
      const bool ok = capacity > 0;
      if (ok && capacity != context->max_seq_len.load()) {
        context->max_seq_len.store(capacity);
        std::fprintf(stderr,
                     "pdserve frontend: the engine's capacity is now %ld "
                     "tokens\n",
                     static_cast<long>(capacity));
      }
      if (ok != serving && !stop) {
        serving = ok;
        rpc::SetServing(*srv, kServices, ok);
        http_api.SetReady(ok);
        if (metrics_server) metrics_server->SetReady(ok);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });

  process::WaitForTerminationSignal();
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
      std::chrono::steady_clock::now() + std::chrono::seconds(flags.drain_seconds);
  while ((service.active_streams() > 0 || http_api.active() > 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (service.active_streams() > 0 || http_api.active() > 0) {
    // The drain time ran out: end what is still open with our reason
    // (not gRPC's "Cancelling all calls"), then give the writes a moment.
    GenerationStream::AbortAll(grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        absl::StrCat("the server is shutting down: the stream did not finish "
                     "within the drain time (--drain-seconds ",
                     flags.drain_seconds, ")")));
    const auto grace =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while ((service.active_streams() > 0 || http_api.active() > 0) &&
           std::chrono::steady_clock::now() < grace) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (http_server != nullptr) http_server->Stop();
  srv->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}

}  // namespace pdserve::frontend
