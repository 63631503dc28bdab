// The /metrics HTTP endpoint of one pdserve process (prometheus-cpp Exposer,
// civetweb underneath), plus the metrics every process exports
// (pdserve_build_info, pdserve_ready, pdserve_process_start_time_seconds).
//
// Usage in a process shell:
//   auto server = MetricsServer::Start({.host = "0.0.0.0", .port = 9400,
//                                       .process = "engine"});
//   if (!server.ok()) ...;
//   EngineMetrics metrics((*server)->registry(), options);
//   ... (*server)->SetReady(true) once the model is loaded.
//
// CUDA pitfall (see ../shared/notes/toolchain.md): civetweb starts its worker
// threads with ~100 KiB stacks and glibc places a process's static TLS inside
// each thread's stack. libcublasLt alone carries ~92 KiB of TLS, so in a
// process that LINKS cuBLAS directly pthread_create fails and the Exposer
// throws "null context when constructing CivetServer" although the port is
// free. pdserve loads its CUDA backend as a dlopen() plugin (its TLS is then
// dynamic, not static), so the Exposer is safe; never link cuBLAS/cuBLASLt
// into a binary that serves /metrics. Start() reports this case with a hint.
#ifndef PDSERVE_COMMON_METRICS_METRICS_SERVER_H_
#define PDSERVE_COMMON_METRICS_METRICS_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace prometheus {
class Exposer;
class Gauge;
class Registry;
}  // namespace prometheus

namespace pdserve::metrics {

struct MetricsServerOptions {
  // Interface to bind: "127.0.0.1", "0.0.0.0", "::" (IPv6 without brackets).
  std::string host = "127.0.0.1";
  // TCP port; 0 picks a free one (read it back with port()).
  int port = 0;
  // HTTP worker threads serving scrapes.
  int num_threads = 2;
  // The `process` label: "frontend", "scheduler", "engine" or "serve".
  std::string process;
};

// Owns the Exposer and the registry it serves at /metrics. Thread-safe: the
// registry and every metric in it may be updated from any thread while
// scrapes run. Destroying the server stops serving; metric sets built on
// registry() keep it alive through their shared_ptr.
class MetricsServer {
 public:
  // Binds host:port and starts serving. INVALID_ARGUMENT for a port outside
  // 0..65535, an empty process or num_threads < 1; UNAVAILABLE when the
  // address cannot be bound (the message names it).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const MetricsServerOptions& options);

  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bound port (the chosen one when options.port was 0).
  int port() const { return port_; }
  const std::string& host() const { return host_; }
  // "http://<host>:<port>/metrics" (brackets around IPv6 hosts).
  std::string url() const;

  const std::shared_ptr<prometheus::Registry>& registry() const {
    return registry_;
  }

  // Sets pdserve_ready{process=...} to 1 or 0.
  void SetReady(bool ready);

 private:
  MetricsServer() = default;

  std::string host_;
  int port_ = 0;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  prometheus::Gauge* ready_ = nullptr;
};

// A fresh, empty registry (for metric sets in tests or in processes that do
// not serve HTTP).
std::shared_ptr<prometheus::Registry> NewRegistry();

// Registers pdserve_build_info, pdserve_ready and
// pdserve_process_start_time_seconds for `process` in `registry` and returns
// the ready gauge (owned by the registry). Used by MetricsServer; exposed for
// processes that serve their registry some other way.
prometheus::Gauge& RegisterProcessMetrics(prometheus::Registry& registry,
                                          const std::string& process);

// The registry in the Prometheus text exposition format (what /metrics
// serves), for tests and debugging.
std::string SerializeText(prometheus::Registry& registry);

// "host:port" with brackets around an IPv6 host, as civetweb and URLs want.
std::string JoinHostPort(const std::string& host, int port);

}  // namespace pdserve::metrics

#endif  // PDSERVE_COMMON_METRICS_METRICS_SERVER_H_
