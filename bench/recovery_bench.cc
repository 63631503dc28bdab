// What a crash costs a stream, over the three real processes (`pdserve
// serve`), printing one JSON object. 64 greedy streams decode; mid-way the
// engine is killed (kill -9), and in a second run the scheduler. For each
// run: every stream's longest gap between two tokens (the stall a client
// sees), p50 and p99 over the streams, against the same figure with nothing
// killed and against the time the killed process took to come back (kill to
// its first answer: the part of the stall no resumption can hide), the
// tokens recomputed (from the scheduler's log) and whether every stream
// completed with its solo tokens.
//
//   recovery_bench [--model PATH] [--streams N] [--tokens N] [--threads N]
// The model defaults to the cached SmolLM2-135M-Instruct.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_flags.h"
#include "bench/percentile.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve_harness.h"

namespace pdserve::testing {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

using bench::Percentile;

struct Options {
  std::string model;
  int streams = 64, tokens = 128, threads = 0;
};

v1::GenerateRequest Request(int i, int tokens) {
  v1::GenerateRequest req;
  req.set_prompt(absl::StrCat("Story number ", i, ": once upon a time"));
  req.set_max_tokens(tokens);
  req.set_ignore_eos(true);
  req.set_return_token_ids(true);
  return req;
}

struct StreamRun {
  grpc::Status status;
  std::vector<int32_t> tokens;
  double max_gap_ms = 0;
};

StreamRun Stream(const ServeInstance& serve, const v1::GenerateRequest& req,
                 std::atomic<int64_t>* deltas) {
  StreamRun r;
  auto stub = serve.Client();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse resp;
  Clock::time_point last{};
  while (reader->Read(&resp)) {
    if (!resp.has_delta() || resp.delta().token_ids_size() == 0) continue;
    const Clock::time_point now = Clock::now();
    if (last != Clock::time_point{}) r.max_gap_ms = std::max(r.max_gap_ms, Ms(now - last));
    last = now;
    r.tokens.insert(r.tokens.end(), resp.delta().token_ids().begin(),
                    resp.delta().token_ids().end());
    deltas->fetch_add(1);
  }
  r.status = reader->Finish();
  return r;
}

// Runs the load; with `role` non-empty kills that child once half the
// tokens have streamed. Fills `restart_ms` with kill -> first answer.
nlohmann::json Run(const ServeInstance& serve, const Options& o,
                   const std::string& role,
                   const std::vector<std::vector<int32_t>>& solo) {
  std::vector<StreamRun> runs(o.streams);
  std::atomic<int64_t> deltas{0};
  std::atomic<bool> done{false};
  double restart_ms = -1;
  std::thread killer([&] {
    if (role.empty()) return;
    const int64_t half = int64_t{o.streams} * o.tokens / 2;
    while (deltas.load() < half && !done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const pid_t pid = ChildPid(serve, role);
    if (done.load() || pid <= 0) return;
    const Clock::time_point killed = Clock::now();
    kill(pid, SIGKILL);
    while (!done.load()) {
      const pid_t now = ChildPid(serve, role);
      bool answers = false;
      if (now > 0 && now != pid) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(200));
        if (role == "engine") {
          v1::EngineInfo info;
          answers = serve.EngineClient()->GetInfo(&ctx, {}, &info).ok();
        } else {
          v1::SchedulerStatus st;
          answers = serve.SchedulerClient()->GetStatus(&ctx, {}, &st).ok();
        }
      }
      if (answers) {
        restart_ms = Ms(Clock::now() - killed);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::vector<std::thread> threads;
  for (int i = 0; i < o.streams; ++i) {
    threads.emplace_back([&, i] { runs[i] = Stream(serve, Request(i, o.tokens), &deltas); });
  }
  for (std::thread& t : threads) t.join();
  done = true;
  killer.join();
  std::vector<double> stalls;
  int intact = 0;
  for (int i = 0; i < o.streams; ++i) {
    stalls.push_back(runs[i].max_gap_ms);
    intact += runs[i].status.ok() && runs[i].tokens == solo[i];
  }
  nlohmann::json j = {{"stall_p50_ms", Percentile(stalls, 0.5)},
                      {"stall_p99_ms", Percentile(stalls, 0.99)},
                      {"streams_intact", intact}};
  if (!role.empty()) j["restart_ms"] = restart_ms;
  return j;
}

// The scheduler's "resumed N requests (M tokens to recompute)" lines.
int64_t RecomputedTokens(const std::string& log) {
  static const std::regex re(R"(\((\d+) tokens to recompute\))");
  int64_t sum = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re);
       it != std::sregex_iterator(); ++it) {
    sum += std::stoll((*it)[1].str());
  }
  return sum;
}

int Main(int argc, char** argv) {
  Options o;
  o.model = SmolLm2();
  bench::BenchFlags(
      "recovery_bench [--model PATH] [--streams N] [--tokens N] [--threads N]")
      .String("model", &o.model)
      .Int("streams", &o.streams, 1, 1024)
      .Int("tokens", &o.tokens, 8)
      .Int("threads", &o.threads, 0)
      .Parse(argc, argv);
  if (o.model.empty()) {
    std::fprintf(stderr,
                 "recovery_bench: no model (cache SmolLM2 or pass --model)\n");
    return 1;
  }
  auto serve = ServeInstance::Start({"--model", o.model, "--kv-memory", "1G",
                                     "--threads", absl::StrCat(o.threads)});
  if (!serve.ok()) {
    std::fprintf(stderr, "recovery_bench: %s\n",
                 std::string(serve.status().message()).c_str());
    return 1;
  }
  std::vector<std::vector<int32_t>> solo;
  {
    auto stub = (*serve)->Client();
    for (int i = 0; i < o.streams; ++i) {
      solo.push_back(Generate(stub.get(), Request(i, o.tokens)).token_ids);
    }
  }
  nlohmann::json out;
  out["model"] = o.model;
  out["streams"] = o.streams;
  out["tokens"] = o.tokens;
  out["baseline"] = Run(**serve, o, "", solo);
  const double base_p99 = out["baseline"]["stall_p99_ms"].get<double>();
  for (const char* role : {"engine", "scheduler"}) {
    const int64_t before = RecomputedTokens((*serve)->log());
    nlohmann::json j = Run(**serve, o, role, solo);
    j["recomputed_tokens"] = RecomputedTokens((*serve)->log()) - before;
    const double restart = j["restart_ms"].get<double>();
    j["stall_p99_over_baseline_p99"] =
        base_p99 > 0 ? j["stall_p99_ms"].get<double>() / base_p99 : 0;
    j["stall_p50_over_restart"] =
        restart > 0 ? j["stall_p50_ms"].get<double>() / restart : 0;
    out[absl::StrCat("kill_", role)] = j;
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace pdserve::testing

int main(int argc, char** argv) { return pdserve::testing::Main(argc, argv); }
