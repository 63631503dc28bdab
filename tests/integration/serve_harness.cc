#include "tests/integration/serve_harness.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/process/process.h"
#include "proto/rpc_util.h"

namespace pdserve::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int FreePortGuess() { return process::FreeLoopbackPort(); }

std::string PdserveBinary() {
  return std::string(PDSERVE_BINARY_DIR) + "/server/cli/pdserve";
}

std::string Stories260K() {
  std::string p =
      std::string(PDSERVE_SHARED_DIR) + "/models/stories260K/stories260K.bin";
  return std::filesystem::exists(p) ? p : "";
}

std::string Stories260KTokenizer() {
  return std::string(PDSERVE_SHARED_DIR) + "/models/stories260K/tok512.bin";
}

std::string SmolLm2() {
  const char* cache = std::getenv("PDSERVE_CACHE");
  const char* home = std::getenv("HOME");
  std::string dir = cache != nullptr
                        ? cache
                        : std::string(home ? home : "") + "/.cache/pdserve";
  std::string p = dir + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  return std::filesystem::exists(p) ? p : "";
}

absl::StatusOr<std::unique_ptr<ServeInstance>> ServeInstance::Start(
    const std::vector<std::string>& args, int timeout_s) {
  auto inst = std::unique_ptr<ServeInstance>(new ServeInstance());
  // Both public ports in one pass, so they differ; serve picks its
  // children's ports around them.
  const std::vector<int> free_ports = process::FreeLoopbackPorts(2, {});
  if (free_ports.size() < 2) {
    return absl::ResourceExhaustedError("no free loopback ports");
  }
  const int port = free_ports[0];
  const std::string base = std::filesystem::temp_directory_path() /
                           absl::StrCat("pdserve-it-", getpid(), "-", port);
  inst->out_path_ = base + ".out";
  inst->err_path_ = base + ".err";
  std::vector<std::string> argv = {PdserveBinary(), "serve", "--port",
                                   absl::StrCat(port)};
  if (std::find(args.begin(), args.end(), "--http-port") == args.end()) {
    argv.push_back("--http-port");
    argv.push_back(absl::StrCat(free_ports[1]));
  }
  argv.insert(argv.end(), args.begin(), args.end());
  pid_t pid = fork();
  if (pid == 0) {
    std::freopen(inst->out_path_.c_str(), "w", stdout);
    std::freopen(inst->err_path_.c_str(), "w", stderr);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  inst->pid_ = pid;
  inst->target_ = absl::StrCat("127.0.0.1:", port);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      inst->pid_ = -1;
      return absl::InternalError(absl::StrCat("pdserve serve exited early:\n",
                                              ReadAll(inst->err_path_)));
    }
    const std::string out = ReadAll(inst->out_path_);
    for (absl::string_view line : absl::StrSplit(out, '\n')) {
      std::vector<std::string> f =
          absl::StrSplit(line, ' ', absl::SkipWhitespace());
      if (f.size() >= 3 && f[0] == "HTTP" && f[1] == "API") {
        inst->http_url_ = f[2];
      }
      if (f.size() >= 4 && f[0] == "scheduler" && f[1] == "pid") {
        inst->scheduler_target_ = f[3];
      }
      if (f.size() >= 4 && f[0] == "engine" && f[1] == "pid") {
        inst->engine_pid_ = std::atoi(f[2].c_str());
        inst->engine_target_ = f[3];
        return inst;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("pdserve serve not ready after ", timeout_s, " s:\n",
                   ReadAll(inst->err_path_)));
}

ServeInstance::~ServeInstance() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(60);
    bool reaped = false;
    while (!reaped && std::chrono::steady_clock::now() < deadline) {
      reaped = waitpid(pid_, nullptr, WNOHANG) == pid_;
      if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!reaped) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  std::remove(out_path_.c_str());
  std::remove(err_path_.c_str());
}

int ServeInstance::WaitExit(int timeout_s) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

std::string ServeInstance::log() const { return ReadAll(err_path_); }

std::unique_ptr<v1::Inference::Stub> ServeInstance::Client() const {
  return v1::Inference::NewStub(rpc::MakeChannel(target_));
}

std::unique_ptr<v1::Engine::Stub> ServeInstance::EngineClient() const {
  return v1::Engine::NewStub(rpc::MakeChannel(engine_target_));
}

std::unique_ptr<v1::Scheduler::Stub> ServeInstance::SchedulerClient() const {
  return v1::Scheduler::NewStub(rpc::MakeChannel(scheduler_target_));
}

GenerateResult Generate(v1::Inference::Stub* stub,
                        const v1::GenerateRequest& req,
                        std::atomic<int64_t>* deltas_seen) {
  GenerateResult r;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::seconds(300));
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    if (resp.has_delta()) {
      ++r.deltas;
      if (deltas_seen != nullptr) deltas_seen->fetch_add(1);
      r.text += resp.delta().text();
      r.token_ids.insert(r.token_ids.end(), resp.delta().token_ids().begin(),
                         resp.delta().token_ids().end());
    } else if (resp.has_final()) {
      r.final = resp.final();
    }
  }
  r.status = reader->Finish();
  return r;
}

namespace {
// Field `index` of the summary lines starting with "<role> pid".
std::vector<std::string> SummaryFields(const std::string& path,
                                       const std::string& role, size_t index) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(ss.str(), '\n')) {
    std::vector<std::string> f =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (f.size() > index && f[0] == role && f[1] == "pid") {
      out.push_back(f[index]);
    }
  }
  return out;
}
}  // namespace

std::vector<std::string> ServeInstance::SchedulerTargets() const {
  return SummaryFields(out_path_, "scheduler", 3);
}

std::vector<pid_t> ServeInstance::EnginePids() const {
  std::vector<pid_t> pids;
  for (const std::string& p : SummaryFields(out_path_, "engine", 2)) {
    pids.push_back(static_cast<pid_t>(std::atoi(p.c_str())));
  }
  return pids;
}

absl::StatusOr<std::unique_ptr<ServeInstance>> StartStories260K(
    const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--model", Stories260K(), "--tokenizer",
                                   Stories260KTokenizer(), "--threads", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return ServeInstance::Start(args);
}

v1::SchedulerStatus SchedulerStatusOf(const std::string& scheduler) {
  auto stub = v1::Scheduler::NewStub(
      grpc::CreateChannel(scheduler, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::SchedulerStatus status;
  if (!stub->GetStatus(&ctx, {}, &status).ok()) status.set_steps(-1);
  return status;
}

pid_t CurrentEnginePid(const ServeInstance& serve) {
  auto engine = serve.EngineClient();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::EngineInfo info;
  if (!engine->GetInfo(&ctx, {}, &info).ok()) return -1;
  return static_cast<pid_t>(info.pid());
}

pid_t ChildPid(const ServeInstance& serve, const std::string& role) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so parse after ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != serve.pid() || state == "Z") continue;
    std::ifstream cmdline(e.path() / "cmdline");
    std::string argv0, argv1;
    std::getline(cmdline, argv0, '\0');
    std::getline(cmdline, argv1, '\0');
    if (argv1 == role) return static_cast<pid_t>(std::atoi(name.c_str()));
  }
  return -1;
}

v1::EngineInfo WaitEngineIdle(v1::Engine::Stub* engine, int polls,
                              int poll_ms) {
  v1::EngineInfo info;
  for (int i = 0; i < polls; ++i) {
    grpc::ClientContext ctx;
    if (engine->GetInfo(&ctx, {}, &info).ok() && info.active_sequences() == 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
  return info;
}

absl::StatusOr<std::string> RunCommand(const std::string& command) {
  FILE* p = popen((command + " 2>/dev/null").c_str(), "r");
  if (p == nullptr) return absl::InternalError("popen failed: " + command);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  if (status != 0) {
    return absl::InternalError(
        absl::StrCat("'", command, "' exited with ", status));
  }
  return out;
}

std::vector<int32_t> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view t :
       absl::StrSplit(text, absl::ByAnyChar(" \n,"), absl::SkipEmpty())) {
    ids.push_back(std::atoi(std::string(t).c_str()));
  }
  return ids;
}

}  // namespace pdserve::testing
