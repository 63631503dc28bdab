// Test harness for the integration suites: starts `pdserve serve` (three
// real processes on free loopback ports), parses its ready summary, and
// offers small clients for the public and internal APIs.
#ifndef PDSERVE_TESTS_INTEGRATION_SERVE_HARNESS_H_
#define PDSERVE_TESTS_INTEGRATION_SERVE_HARNESS_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "pdserve/v1/api.grpc.pb.h"
#include "pdserve/v1/engine.grpc.pb.h"
#include "pdserve/v1/scheduler.grpc.pb.h"

namespace pdserve::testing {

// Path of the pdserve binary in this build.
std::string PdserveBinary();
// A loopback port the kernel just handed out (bound and released).
int FreePortGuess();
// Shared stories260K model files ("" when ../shared is absent).
std::string Stories260K();
std::string Stories260KTokenizer();
// The SmolLM2 GGUF in $PDSERVE_CACHE or ~/.cache/pdserve ("" when absent).
std::string SmolLm2();

// A running `pdserve serve`. The destructor sends SIGTERM and reaps it.
class ServeInstance {
 public:
  // Starts serve with `args` (after "serve"); waits up to `timeout_s` for
  // its ready summary.
  static absl::StatusOr<std::unique_ptr<ServeInstance>> Start(
      const std::vector<std::string>& args, int timeout_s = 120);
  ~ServeInstance();

  const std::string& target() const { return target_; }
  const std::string& engine_target() const { return engine_target_; }
  pid_t engine_pid() const { return engine_pid_; }
  const std::string& scheduler_target() const { return scheduler_target_; }
  // "http://127.0.0.1:PORT/v1" ("" when serve ran with --http-port 0).
  const std::string& http_url() const { return http_url_; }
  pid_t pid() const { return pid_; }
  // Every cell of a `serve --cells N` from its ready summary, in cell
  // order: each scheduler's address and each engine's pid at start.
  std::vector<std::string> SchedulerTargets() const;
  std::vector<pid_t> EnginePids() const;
  std::string log() const;  // serve's stderr so far
  // Waits for serve to exit by itself (after a signal the test sent);
  // returns its wait status, or -1 after `timeout_s`.
  int WaitExit(int timeout_s);

  std::unique_ptr<v1::Inference::Stub> Client() const;
  std::unique_ptr<v1::Engine::Stub> EngineClient() const;
  std::unique_ptr<v1::Scheduler::Stub> SchedulerClient() const;

 private:
  pid_t pid_ = -1;
  pid_t engine_pid_ = -1;
  std::string target_, engine_target_, scheduler_target_, http_url_;
  std::string out_path_, err_path_;
};

// The outcome of one Generate call.
struct GenerateResult {
  grpc::Status status;
  std::string text;
  std::vector<int32_t> token_ids;
  v1::Final final;
  int deltas = 0;
};
// `pdserve serve` on stories260K (its tokenizer, --threads 1) with `extra`
// arguments after those.
absl::StatusOr<std::unique_ptr<ServeInstance>> StartStories260K(
    const std::vector<std::string>& extra);

// `deltas_seen` (optional) is incremented once per delta received, for a
// test that acts once a load is under way.
GenerateResult Generate(v1::Inference::Stub* stub,
                        const v1::GenerateRequest& req,
                        std::atomic<int64_t>* deltas_seen = nullptr);
// The engine's current pid (it changes when the supervisor restarts it), or
// -1 when it does not answer.
pid_t CurrentEnginePid(const ServeInstance& serve);
// The pid of serve's live child running `pdserve <role>` ("engine",
// "scheduler", "frontend"), found in /proc; -1 when there is none.
pid_t ChildPid(const ServeInstance& serve, const std::string& role);

// A scheduler's GetStatus (2 s deadline); steps -1 when it does not answer.
v1::SchedulerStatus SchedulerStatusOf(const std::string& scheduler);

// Polls the engine's GetInfo every `poll_ms` until it holds no sequence, at
// most `polls` times; returns the last figures (a failed call counts as
// not idle and leaves them default).
v1::EngineInfo WaitEngineIdle(v1::Engine::Stub* engine, int polls = 100,
                              int poll_ms = 20);

// Runs a shell command; returns its stdout (stderr discarded) or an error
// with the exit status.
absl::StatusOr<std::string> RunCommand(const std::string& command);

// Parses "1 2 3\n" into ids.
std::vector<int32_t> ParseIds(const std::string& text);

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_INTEGRATION_SERVE_HARNESS_H_
