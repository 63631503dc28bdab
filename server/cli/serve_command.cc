// `pdserve serve --model PATH`: starts the engine, scheduler and front end as
// three child processes on loopback and supervises them. A child that dies
// is restarted (the scheduler fails in-flight requests with UNAVAILABLE and
// reconnects; health is NOT_SERVING meanwhile). SIGTERM/SIGINT drains: the
// front end stops taking requests and lets open streams finish, then the
// scheduler and the engine stop. --model (that it exists) and a --device
// other than cpu are checked before anything starts. Until the service is
// first ready, a child that fails to start is not retried forever: a usage
// error (exit 2), or a third failure of the same child, stops everything and
// serve exits 1 (the child's own message is above, on stderr). Once ready,
// children are restarted however often they die.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/backend/backend_loader.h"
#include "engine/backend/device_spec.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "proto/rpc_util.h"
#include "scheduler/cli_args.h"
#include "server/cli/command.h"

namespace pdserve::cli {
namespace {

const std::vector<FlagSpec>& Flags() {
  static const auto* flags = new std::vector<FlagSpec>{
      {"model", true, "model file or folder"},
      {"tokenizer", true,
       "tokenizer file when the model carries none (llama2.c)"},
      {"host", true, "public interface (default 127.0.0.1)"},
      {"port", true, "public gRPC port (default 50051)"},
      {"engine-port", true,
       "engine gRPC port on loopback (default: a free one)"},
      {"scheduler-port", true,
       "scheduler gRPC port on loopback (default: a free one)"},
      {"metrics-port", true,
       "first of three /metrics ports: frontend, scheduler, engine (default: "
       "free ports)"},
      {"no-prefix-cache", false, "engine: turn off automatic prefix caching"},
      {"vllm-metrics", false,
       "all three: also export the vllm:* compatibility gauges"},
      {"peak-memory-bandwidth", true,
       "engine: device peak memory bandwidth in bytes/s (0 = measure at "
       "start)"},
      {"threads", true, "engine compute threads"},
      {"device", true, "engine device: cpu (default), cuda or cuda:N"},
      {"kv-memory", true, "engine KV budget (fraction or bytes)"},
      {"page-size", true, "tokens per KV page"},
      {"max-sequences", true, "engine: sequences live at once"},
      {"max-step-tokens", true, "engine: most tokens in one step"},
      {"itl-slowdown", true,
       "scheduler: adapt the step budget so a step with prefill costs at most "
       "X times a decode-only step (default 1.5; 0 = fixed budget)"},
      {"step-timeout", true,
       "scheduler: seconds to wait for a step's result before treating the "
       "engine as hung (default 120)"},
      {"pipeline-depth", true,
       "scheduler: steps queued at the engine ahead of their results (default "
       "2; 1 = none)"},
      {"budget", true, "scheduler: tokens per step"},
      {"chunk", true, "scheduler: prefill chunk (0 = off)"},
      {"max-running", true, "scheduler: sequences running at once"},
      {"max-queue", true, "scheduler: waiting queue bound"},
      {"step-log", true, "scheduler: per-step CSV for simulate --calibration"},
      {"drain-seconds", true, "front end drain time on SIGTERM (default 30)"},
      {"name", true, "model name to report"},
      {"served-model-name", true,
       "model name the public APIs serve (default: the model file's stem)"},
      {"http-port", true,
       "OpenAI/Anthropic-compatible HTTP API port (default 8000; 0 = off)"},
      {"http-threads", true, "front end: HTTP API IO threads (default 2)"},
      {"http-max-body", true,
       "front end: largest HTTP request body in bytes (default 8388608)"},
      {"api-key", true,
       "front end: HTTP API keys, comma-separated (default: none required)"},
      {"api-key-file", true, "front end: file of HTTP API keys, one a line"},
      {"config", true,
       "JSON config file (sections serve/engine/scheduler/frontend)"},
  };
  return *flags;
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

struct Child {
  std::string name;
  std::vector<std::string> args;  // after "pdserve"
  pid_t pid = -1;
  int restarts = 0;
};

// Checks --device before the children start: 2 for a malformed device, 1
// (message on stderr) when its plugin does not load or the device does not
// answer, else 0. The query runs in a short-lived child process so that this
// supervisor never holds a device context.
int CheckDevice(const std::string& text) {
  auto device = ParseDeviceSpec(text);
  if (!device.ok()) {
    std::fprintf(stderr, "pdserve serve: %s\n",
                 std::string(device.status().message()).c_str());
    return 2;
  }
  if (device->is_cpu()) return 0;
  int fds[2];
  if (pipe(fds) != 0) return 0;  // the engine will report it
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return 0;
  }
  if (pid == 0) {
    close(fds[0]);
    auto info = QueryDevice(*device, BackendOptions{});
    if (info.ok()) _exit(0);
    const std::string msg(info.status().message());
    ssize_t unused = write(fds[1], msg.data(), msg.size());
    (void)unused;
    _exit(1);
  }
  close(fds[1]);
  std::string msg;
  char buf[1024];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) msg.append(buf, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  std::fprintf(stderr, "pdserve serve: --device %s: %s\n",
               device->ToString().c_str(),
               msg.empty() ? "the device check failed" : msg.c_str());
  return 1;
}

// Before the service is first ready, a failed start is given up on after
// this many exits of one child.
constexpr int kStartAttempts = 3;

// 0 when `path` exists and is readable, else 1 with a message on stderr.
int CheckModelPath(const std::string& path) {
  if (access(path.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "pdserve serve: --model %s: %s\n", path.c_str(),
                 std::strerror(errno));
    return 1;
  }
  return 0;
}

// Whether a child's exit before the service was ever ready ends serve: a
// usage error (exit status 2) at once, any other failure at the
// kStartAttempts-th exit.
bool StartFailed(const Child& c, int status) {
  const bool usage = WIFEXITED(status) && WEXITSTATUS(status) == 2;
  return usage || c.restarts >= kStartAttempts;
}

pid_t Spawn(const Child& child) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  // Child: default signal mask (the exec'd command blocks what it needs),
  // stdout joins stderr so serve's own stdout carries only its summary.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  dup2(2, 1);
  std::vector<char*> argv;
  std::string self = "pdserve";
  argv.push_back(self.data());
  std::vector<std::string> copy = child.args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv("/proc/self/exe", argv.data());
  std::perror("pdserve serve: exec");
  _exit(127);
}

bool HealthServing(grpc::health::v1::Health::Stub* stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(500));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  return stub->Check(&ctx, req, &resp).ok() &&
         resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

void StopChild(Child& c, int seconds) {
  if (c.pid <= 0) return;
  kill(c.pid, SIGTERM);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(c.pid, nullptr, WNOHANG) == c.pid) {
      c.pid = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(c.pid, SIGKILL);
  waitpid(c.pid, nullptr, 0);
  c.pid = -1;
}

// Appends "--flag value" for each flag given to serve.
void Forward(const CliArgs& args, std::vector<std::string>& out,
             std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (args.Has(n)) {
      out.push_back(absl::StrCat("--", n));
      out.push_back(args.String(n, ""));
    }
  }
}

int RunServe(int argc, char** argv) {
  rpc::BlockTerminationSignals();
  auto args = CliArgs::Parse(argc, argv, Flags());
  if (args.ok() && !args->help()) {
    if (absl::Status s = args->ApplyConfigFile("serve", Flags()); !s.ok())
      args = s;
  }
  if (!args.ok()) {
    std::fprintf(stderr, "pdserve serve: %s\n",
                 std::string(args.status().message()).c_str());
    return 2;
  }
  if (args->help() || !args->Has("model")) {
    std::fprintf(
        args->help() ? stdout : stderr,
        "usage: pdserve serve --model PATH [--port 50051] [options]\n%s",
        CliArgs::Usage(Flags()).c_str());
    return args->help() ? 0 : 2;
  }
  if (int rc = CheckModelPath(args->String("model", "")); rc != 0) return rc;
  if (int rc = CheckDevice(args->String("device", "cpu")); rc != 0) return rc;
  const std::string host = args->String("host", "127.0.0.1");
  const std::string port = args->String("port", "50051");
  if (auto p = args->Int("port", 50051); !p.ok() || *p < 0 || *p > 65535) {
    std::fprintf(stderr, "pdserve serve: --port %s is not a port in 0..65535\n",
                 port.c_str());
    return 2;
  }
  const std::string engine_port =
      args->String("engine-port", absl::StrCat(FreePort()));
  const std::string scheduler_port =
      args->String("scheduler-port", absl::StrCat(FreePort()));
  auto metrics_base = args->Int("metrics-port", 0);
  std::vector<std::string> metrics(3);
  for (int i = 0; i < 3; ++i) {
    metrics[i] = metrics_base.ok() && *metrics_base > 0
                     ? absl::StrCat(*metrics_base + i)
                     : absl::StrCat(FreePort());
  }
  const std::string config = args->String("config", "");

  Child engine{
      "engine",
      {"engine", "--model", args->String("model", ""), "--host", "127.0.0.1",
       "--port", engine_port, "--metrics-port", metrics[2]}};
  Forward(*args, engine.args,
          {"threads", "device", "kv-memory", "page-size", "max-sequences",
           "max-step-tokens", "name", "peak-memory-bandwidth", "config"});
  Child sched{"scheduler",
              {"scheduler", "--engine", absl::StrCat("127.0.0.1:", engine_port),
               "--host", "127.0.0.1", "--port", scheduler_port,
               "--metrics-port", metrics[1]}};
  Forward(*args, sched.args,
          {"budget", "chunk", "max-running", "max-queue", "step-log",
           "itl-slowdown", "pipeline-depth", "step-timeout", "name", "config"});
  Child front{"frontend",
              {"frontend", "--model", args->String("model", ""), "--scheduler",
               absl::StrCat("127.0.0.1:", scheduler_port), "--host", host,
               "--port", port, "--metrics-port", metrics[0]}};
  Forward(*args, front.args,
          {"tokenizer", "drain-seconds", "name", "served-model-name",
           "http-threads", "http-max-body", "api-key", "api-key-file",
           "config"});
  const std::string http_port = args->String("http-port", "8000");
  if (auto p = args->Int("http-port", 8000); !p.ok() || *p < 0 || *p > 65535) {
    std::fprintf(stderr,
                 "pdserve serve: --http-port %s is not a port in 0..65535\n",
                 http_port.c_str());
    return 2;
  }
  front.args.push_back("--http-port");
  front.args.push_back(http_port);
  std::vector<Child*> children = {&engine, &sched, &front};
  if (args->Bool("no-prefix-cache")) engine.args.push_back("--no-prefix-cache");
  if (args->Bool("vllm-metrics")) {
    for (Child* c : children) c->args.push_back("--vllm-metrics");
  }
  for (Child* c : children) c->pid = Spawn(*c);

  const std::string public_target =
      absl::StrCat(host == "0.0.0.0" ? "127.0.0.1" : host, ":", port);
  bool announced = false;
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGINT);
  sigaddset(&term, SIGTERM);
  const timespec tick{0, 100 * 1000 * 1000};
  while (true) {
    if (sigtimedwait(&term, nullptr, &tick) > 0) break;
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (Child* c : children) {
        if (c->pid != pid) continue;
        ++c->restarts;
        const bool give_up = !announced && StartFailed(*c, status);
        std::fprintf(
            stderr, "pdserve serve: %s (pid %d) exited (%s %d)%s\n",
            c->name.c_str(), pid, WIFSIGNALED(status) ? "signal" : "status",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
            give_up ? "" : absl::StrCat("; restart #", c->restarts).c_str());
        if (give_up) {
          std::fprintf(
              stderr,
              "pdserve serve: the %s failed to start (%d exit%s before "
              "the service was ready); stopping (its messages are "
              "above)\n",
              c->name.c_str(), c->restarts, c->restarts == 1 ? "" : "s");
          c->pid = -1;
          StopChild(front, 5);
          StopChild(sched, 5);
          StopChild(engine, 5);
          return 1;
        }
        std::this_thread::sleep_for(
            std::chrono::milliseconds(std::min(2000, 100 * c->restarts)));
        c->pid = Spawn(*c);
      }
    }
    // A fresh channel per check: one that was refused while the front end
    // started may sit in reconnect backoff.
    if (!announced && HealthServing(grpc::health::v1::Health::NewStub(
                                        rpc::MakeChannel(public_target))
                                        .get())) {
      announced = true;
      std::printf("pdserve serve: ready\n");
      std::printf(
          "  public API  %s:%s  (pdserve.v1.Inference, grpc.health.v1, "
          "reflection)\n",
          host.c_str(), port.c_str());
      if (http_port != "0") {
        std::printf(
            "  HTTP API    http://%s:%s/v1  (OpenAI- and Anthropic-compatible)\n",
            host.c_str(), http_port.c_str());
      }
      std::printf("  frontend    pid %d  metrics http://127.0.0.1:%s/metrics\n",
                  front.pid, metrics[0].c_str());
      std::printf(
          "  scheduler   pid %d  127.0.0.1:%s  metrics "
          "http://127.0.0.1:%s/metrics\n",
          sched.pid, scheduler_port.c_str(), metrics[1].c_str());
      std::printf(
          "  engine      pid %d  127.0.0.1:%s  metrics "
          "http://127.0.0.1:%s/metrics\n",
          engine.pid, engine_port.c_str(), metrics[2].c_str());
      std::fflush(stdout);
    }
  }
  std::fprintf(stderr, "pdserve serve: draining\n");
  auto drain = args->Int("drain-seconds", 30);
  StopChild(front, static_cast<int>(drain.ok() ? *drain : 30) + 5);
  StopChild(sched, 35);
  StopChild(engine, 10);
  return 0;
}

}  // namespace

PDSERVE_COMMAND(
    serve,
    "start frontend, scheduler and engine on loopback and supervise them",
    RunServe);

}  // namespace pdserve::cli
