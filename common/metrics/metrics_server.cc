#include "common/metrics/metrics_server.h"

#include <chrono>
#include <exception>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "prometheus/exposer.h"
#include "prometheus/text_serializer.h"
#include "common/metrics/families.h"

#ifndef PDSERVE_VERSION
#define PDSERVE_VERSION "unknown"
#endif

namespace pdserve::metrics {

std::string JoinHostPort(const std::string& host, int port) {
  if (absl::StrContains(host, ':') && !absl::StartsWith(host, "[")) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

std::shared_ptr<prometheus::Registry> NewRegistry() {
  return std::make_shared<prometheus::Registry>();
}

prometheus::Gauge& RegisterProcessMetrics(prometheus::Registry& registry,
                                          const std::string& process) {
  internal::GaugeFamily(registry, kBuildInfo)
      .Add({{"version", PDSERVE_VERSION}, {"process", process}})
      .Set(1.0);
  const double now = std::chrono::duration<double>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  internal::GaugeFamily(registry, kStartTime)
      .Add({{"process", process}})
      .Set(now);
  prometheus::Gauge& ready =
      internal::GaugeFamily(registry, kReady).Add({{"process", process}});
  ready.Set(0.0);
  return ready;
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const MetricsServerOptions& options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port ", options.port, " is outside 0..65535"));
  }
  if (options.num_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics server num_threads is ", options.num_threads,
                     ", must be >= 1"));
  }
  if (options.process.empty() || options.host.empty()) {
    return absl::InvalidArgumentError(
        "metrics server needs a non-empty process name and host");
  }
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->host_ = options.host;
  server->registry_ = std::make_shared<prometheus::Registry>();
  server->ready_ = &RegisterProcessMetrics(*server->registry_, options.process);
  const std::string bind = JoinHostPort(options.host, options.port);
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(
        bind, static_cast<std::size_t>(options.num_threads));
  } catch (const std::exception& e) {
    std::string hint;
    if (absl::StrContains(e.what(), "null context")) {
      hint =
          " (if the port is free: this process may link cuBLAS directly, whose "
          "static TLS does not fit civetweb's thread stacks; load the CUDA "
          "backend as a plugin instead)";
    }
    return absl::UnavailableError(
        absl::StrCat("cannot serve /metrics on ", bind, ": ", e.what(), hint));
  }
  const std::vector<int> ports = server->exposer_->GetListeningPorts();
  if (ports.empty() || ports.front() <= 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics server on ", bind, " reports no listening port"));
  }
  server->port_ = ports.front();
  server->exposer_->RegisterCollectable(server->registry_);
  return server;
}

MetricsServer::~MetricsServer() = default;

std::string MetricsServer::url() const {
  return absl::StrCat("http://", JoinHostPort(host_, port_), "/metrics");
}

void MetricsServer::SetReady(bool ready) { ready_->Set(ready ? 1.0 : 0.0); }

std::string SerializeText(prometheus::Registry& registry) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  return out.str();
}

}  // namespace pdserve::metrics
