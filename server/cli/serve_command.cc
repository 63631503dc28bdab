// `pdserve serve --model PATH`: starts the engine, scheduler and front end as
// child processes on loopback (with --cells N, N engine + scheduler pairs
// behind the one front end) and supervises them. A child that dies is
// restarted (the scheduler keeps its requests and resumes them on the
// restarted engine, the front end resubmits streams to a restarted
// scheduler; health is NOT_SERVING while no cell is ready). SIGTERM/SIGINT drains: the
// front end stops taking requests and lets open streams finish, then the
// scheduler and the engine stop. --model (that it exists) and a --device
// other than cpu are checked before anything starts. Until the service is
// first ready, a child that fails to start is not retried forever: a usage
// error (exit 2), or a third failure of the same child, stops everything and
// serve exits 1 (the child's own message is above, on stderr). Once ready,
// children are restarted however often they die.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/backend/backend_loader.h"
#include "engine/backend/device_spec.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "proto/rpc_util.h"
#include "common/process/process.h"
#include "config/process_options.h"
#include "server/cli/command.h"

namespace pdserve::cli {
namespace {

struct Child {
  std::string name;
  std::vector<std::string> args;  // after "pdserve"
  pid_t pid = -1;
  int restarts = 0;     // every exit since serve started
  int quick_exits = 0;  // exits in a row, each within kSteadyRun of its start
  std::chrono::steady_clock::time_point started;
};

// A child that ran this long before it exited restarts at once; one that
// keeps exiting sooner waits 100 ms more for each such exit in a row (at
// most 2 s), so a crash loop does not spin.
constexpr std::chrono::seconds kSteadyRun{10};

std::chrono::milliseconds RestartDelay(Child& c) {
  const auto now = std::chrono::steady_clock::now();
  c.quick_exits = now - c.started >= kSteadyRun ? 0 : c.quick_exits + 1;
  return std::chrono::milliseconds(std::min(2000, 100 * c.quick_exits));
}

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

pid_t Spawn(Child& child) {
  child.started = std::chrono::steady_clock::now();
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

// Appends "--flag=value" for each flag of `child`'s table that serve was
// given (on its command line, in the environment or its config section),
// except serve's own (addresses and ports it sets itself).
template <typename Options>
void Forward(const config::Resolution& resolution,
             const config::FlagTable<Options>& child,
             std::vector<std::string>& out) {
  for (const auto& f : child.flags) {
    if (config::IsServeOwnFlag(f.info.name)) continue;
    auto it = resolution.values.find(f.info.name);
    if (it == resolution.values.end() ||
        it->second.source == config::Source::kDefault) {
      continue;
    }
    out.push_back(absl::StrCat("--", f.info.name, "=", it->second.text));
  }
  if (!resolution.config_path.empty()) {
    out.push_back(absl::StrCat("--config=", resolution.config_path));
  }
}

// Cells share the machine: each engine gets its share of --threads (0 =
// every core), at least one; a forwarded --threads is replaced.
void SplitThreads(int64_t threads, int cells, std::vector<std::string>& args) {
  const int64_t total =
      threads > 0 ? threads
                  : std::max<int64_t>(1, std::thread::hardware_concurrency());
  args.erase(std::remove_if(args.begin(), args.end(),
                            [](const std::string& a) {
                              return absl::StartsWith(a, "--threads=");
                            }),
             args.end());
  args.push_back(absl::StrCat("--threads=", std::max<int64_t>(1, total / cells)));
}

// With several cells, a forwarded --step-log=PATH becomes PATH.<cell> (one
// log per scheduler, for `simulate --calibration`).
void PerCellStepLog(int c, std::vector<std::string>& args) {
  for (std::string& a : args) {
    if (absl::StartsWith(a, "--step-log=") && a.size() > 11) {
      absl::StrAppend(&a, ".", c);
    }
  }
}

// --prefill-cells: cell `c` of them gets --role prefill, the rest decode; a
// forwarded --role is replaced.
void SetRole(int c, int64_t prefill_cells, std::vector<std::string>& args) {
  if (prefill_cells <= 0) return;
  args.erase(std::remove_if(args.begin(), args.end(),
                            [](const std::string& a) {
                              return absl::StartsWith(a, "--role=");
                            }),
             args.end());
  args.push_back(c < prefill_cells ? "--role=prefill" : "--role=decode");
}

// The loopback ports of serve's children, as flag values: /metrics (the
// front end's, then each cell's scheduler and engine), then each cell's
// engine and scheduler gRPC port.
struct ChildPorts {
  std::vector<std::string> metrics, engines, schedulers;
};

// Ports the options fix (0 = pick one), then the rest picked in one pass
// that avoids those and never repeats itself, so no two children (nor a
// child and the front end's public or HTTP port) are handed the same port.
absl::StatusOr<ChildPorts> AssignChildPorts(const config::ServeOptions& o,
                                            int cells) {
  const int metrics_count = 1 + 2 * cells;
  const bool metrics_given = o.metrics_port.has_value() && *o.metrics_port > 0;
  std::vector<int> fixed = {static_cast<int>(o.port),
                            static_cast<int>(o.frontend.http_port),
                            static_cast<int>(o.engine_port),
                            static_cast<int>(o.scheduler_port)};
  for (int i = 0; metrics_given && i < metrics_count; ++i) {
    fixed.push_back(static_cast<int>(*o.metrics_port) + i);
  }
  const int wanted = (metrics_given ? 0 : metrics_count) + 2 * cells;
  const std::vector<int> picked = process::FreeLoopbackPorts(wanted, fixed);
  if (static_cast<int>(picked.size()) < wanted) {
    return absl::ResourceExhaustedError(
        absl::StrCat("could bind only ", picked.size(), " of the ", wanted,
                     " free loopback ports the children need"));
  }
  size_t next = 0;
  auto pick = [&](int64_t given) {
    return absl::StrCat(given > 0 ? given : picked[next++]);
  };
  ChildPorts ports;
  for (int i = 0; i < metrics_count; ++i) {
    ports.metrics.push_back(pick(metrics_given ? *o.metrics_port + i : 0));
  }
  for (int c = 0; c < cells; ++c) {
    ports.engines.push_back(pick(c == 0 ? o.engine_port : 0));
    ports.schedulers.push_back(pick(c == 0 ? o.scheduler_port : 0));
  }
  return ports;
}

int RunServe(int argc, char** argv) {
  process::BlockTerminationSignals();
  const auto& table = config::ServeFlagTable();
  auto parsed =
      config::ParseCommand(table, argc, argv, config::Layers::Process());
  if (!parsed.ok()) {
    std::fprintf(stderr, "pdserve serve: %s\n",
                 std::string(parsed.status().message()).c_str());
    return 2;
  }
  const config::ServeOptions& o = parsed->options;
  if (parsed->resolution.help || o.model.empty()) {
    std::fprintf(
        parsed->resolution.help ? stdout : stderr,
        "usage: pdserve serve --model PATH [--port 50051] [options]\n%s",
        table.Usage().c_str());
    return parsed->resolution.help ? 0 : 2;
  }
  if (int rc = CheckModelPath(o.model); rc != 0) return rc;
  if (int rc = CheckDevice(o.engine.device); rc != 0) return rc;
  const std::string& host = o.host;
  const std::string port = absl::StrCat(o.port);
  const int cells = static_cast<int>(o.cells);
  if (o.prefill_cells >= cells) {
    std::fprintf(stderr,
                 "pdserve serve: --prefill-cells %lld must be less than "
                 "--cells %d (at least one cell must decode)\n",
                 static_cast<long long>(o.prefill_cells), cells);
    return 2;
  }
  absl::StatusOr<ChildPorts> ports = AssignChildPorts(o, cells);
  if (!ports.ok()) {
    std::fprintf(stderr, "pdserve serve: %s\n",
                 std::string(ports.status().message()).c_str());
    return 1;
  }
  const std::vector<std::string>& metrics = ports->metrics;
  const std::vector<std::string>& engine_ports = ports->engines;
  const std::vector<std::string>& scheduler_ports = ports->schedulers;
  const config::Resolution& given = parsed->resolution;
  std::vector<Child> engines, scheds;
  for (int c = 0; c < cells; ++c) {
    Child engine{cells == 1 ? "engine" : absl::StrCat("engine ", c),
                 {"engine", "--model", o.model, "--host", "127.0.0.1",
                  "--port", engine_ports[c], "--metrics-port",
                  metrics[2 + 2 * c]}};
    Forward(given, config::EngineFlagTable(), engine.args);
    if (cells > 1) SplitThreads(o.engine.threads, cells, engine.args);
    Child sched{cells == 1 ? "scheduler" : absl::StrCat("scheduler ", c),
                {"scheduler", "--engine",
                 absl::StrCat("127.0.0.1:", engine_ports[c]), "--host",
                 "127.0.0.1", "--port", scheduler_ports[c], "--metrics-port",
                 metrics[1 + 2 * c]}};
    Forward(given, config::SchedulerFlagTable(), sched.args);
    SetRole(c, o.prefill_cells, sched.args);
    if (cells > 1) PerCellStepLog(c, sched.args);
    engines.push_back(std::move(engine));
    scheds.push_back(std::move(sched));
  }
  std::string scheduler_list;
  for (const std::string& p : scheduler_ports) {
    absl::StrAppend(&scheduler_list, scheduler_list.empty() ? "" : ",",
                    "127.0.0.1:", p);
  }
  Child front{"frontend",
              {"frontend", "--model", o.model, "--scheduler", scheduler_list,
               "--host", host, "--port", port, "--metrics-port", metrics[0]}};
  Forward(given, config::FrontendFlagTable(), front.args);
  const std::string http_port = absl::StrCat(o.frontend.http_port);
  std::vector<Child*> children;
  for (Child& e : engines) children.push_back(&e);
  for (Child& s : scheds) children.push_back(&s);
  children.push_back(&front);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &chld, nullptr);
  for (Child* c : children) c->pid = Spawn(*c);

  const std::string public_target =
      absl::StrCat(host == "0.0.0.0" ? "127.0.0.1" : host, ":", port);
  bool announced = false;
  // SIGCHLD wakes the loop the moment a child exits (it is blocked here,
  // and each child unblocks everything before exec).
  sigset_t term, wake;
  sigemptyset(&term);
  sigaddset(&term, SIGINT);
  sigaddset(&term, SIGTERM);
  wake = term;
  sigaddset(&wake, SIGCHLD);
  const timespec tick{0, 100 * 1000 * 1000};
  while (true) {
    const int sig = sigtimedwait(&wake, nullptr, &tick);
    if (sig > 0 && sigismember(&term, sig)) break;
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
          for (Child& s : scheds) StopChild(s, 5);
          for (Child& e : engines) StopChild(e, 5);
          return 1;
        }
        std::this_thread::sleep_for(RestartDelay(*c));
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
      for (int c = 0; c < cells; ++c) {
        const std::string cell =
            cells == 1 ? "" : absl::StrCat("  (cell ", c, ")");
        std::printf(
            "  scheduler   pid %d  127.0.0.1:%s  metrics "
            "http://127.0.0.1:%s/metrics%s\n",
            scheds[c].pid, scheduler_ports[c].c_str(),
            metrics[1 + 2 * c].c_str(), cell.c_str());
        std::printf(
            "  engine      pid %d  127.0.0.1:%s  metrics "
            "http://127.0.0.1:%s/metrics%s\n",
            engines[c].pid, engine_ports[c].c_str(),
            metrics[2 + 2 * c].c_str(), cell.c_str());
      }
      std::fflush(stdout);
    }
  }
  std::fprintf(stderr, "pdserve serve: draining\n");
  StopChild(front, static_cast<int>(o.frontend.drain_seconds) + 5);
  for (Child& s : scheds) StopChild(s, 35);
  for (Child& e : engines) StopChild(e, 10);
  return 0;
}

}  // namespace

PDSERVE_COMMAND(
    serve,
    "start frontend, scheduler and engine on loopback and supervise them",
    RunServe);

}  // namespace pdserve::cli
