// What a crash costs a stream, over the three real processes (`pdserve
// serve`), printing one JSON object. 64 greedy streams decode; mid-way the
// engine is killed (kill -9), and in a second run the scheduler. For each
// run: every stream's longest gap between two tokens (the stall a client
// sees), p50 and p99 over the streams, against the same figure with nothing
// killed and against the time the killed process took to come back (kill to
// its first answer: the part of the stall no resumption can hide), the
// tokens recomputed (the scheduler's status) and whether every stream
// completed with its solo tokens.
//
//   recovery_bench [--model PATH] [--streams N] [--tokens N] [--threads N]
// The model defaults to the cached SmolLM2-135M-Instruct.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
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
  size_t tokens_before_gap = 0;  // tokens received when the longest gap began
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
    if (last != Clock::time_point{} && Ms(now - last) > r.max_gap_ms) {
      r.max_gap_ms = Ms(now - last);
      r.tokens_before_gap = r.tokens.size();
    }
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
                   const std::vector<std::vector<int32_t>>& solo,
                   std::vector<size_t>* tokens_before_gap) {
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
  tokens_before_gap->clear();
  for (int i = 0; i < o.streams; ++i) {
    stalls.push_back(runs[i].max_gap_ms);
    tokens_before_gap->push_back(runs[i].tokens_before_gap);
    intact += runs[i].status.ok() && runs[i].tokens == solo[i];
  }
  nlohmann::json j = {{"stall_p50_ms", Percentile(stalls, 0.5)},
                      {"stall_p99_ms", Percentile(stalls, 0.99)},
                      {"streams_intact", intact}};
  if (!role.empty()) j["restart_ms"] = restart_ms;
  return j;
}

// The scheduler's count of tokens prefilled again to resume requests
// (SchedulerStatus.recomputed_tokens; -1 when it does not answer).
int64_t RecomputedTokens(const ServeInstance& serve) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::SchedulerStatus st;
  if (!serve.SchedulerClient()->GetStatus(&ctx, {}, &st).ok()) return -1;
  return st.recomputed_tokens();
}

// The floor under a stall: the same streams' recompute with nothing
// killed. All of them at once submit their prompt plus the tokens they had
// when their stall began as a fresh prompt (one extra leading token keeps
// the prefix cache out of it) and the time to each one's first token is
// taken; p50 and p99 over the streams.
nlohmann::json RecomputeFloor(const ServeInstance& serve, const Options& o,
                              const std::vector<std::vector<int32_t>>& solo,
                              const std::vector<size_t>& tokens_before_gap) {
  auto stub = serve.Client();
  std::vector<double> ttft(o.streams, 0);
  std::vector<std::thread> threads;
  int64_t tokens = 0;
  std::vector<v1::GenerateRequest> reqs(o.streams);
  for (int i = 0; i < o.streams; ++i) {
    grpc::ClientContext ctx;
    v1::TokenizeRequest treq;
    treq.set_text(Request(i, o.tokens).prompt());
    treq.set_add_bos(true);
    v1::TokenizeResponse tresp;
    if (!stub->Tokenize(&ctx, treq, &tresp).ok()) return {{"error", "Tokenize failed"}};
    v1::GenerateRequest& req = reqs[i];
    req.add_prompt_ids(tresp.token_ids(tresp.token_ids_size() - 1));
    req.mutable_prompt_ids()->Add(tresp.token_ids().begin(), tresp.token_ids().end());
    req.mutable_prompt_ids()->Add(solo[i].begin(),
                                  solo[i].begin() + std::min(solo[i].size(),
                                                             tokens_before_gap[i]));
    req.set_max_tokens(1);
    req.set_ignore_eos(true);
    tokens += req.prompt_ids_size();
  }
  for (int i = 0; i < o.streams; ++i) {
    threads.emplace_back([&, i] {
      grpc::ClientContext ctx;
      const Clock::time_point start = Clock::now();
      auto reader = stub->Generate(&ctx, reqs[i]);
      v1::GenerateResponse resp;
      while (reader->Read(&resp)) {
        if (resp.has_delta() && ttft[i] == 0) ttft[i] = Ms(Clock::now() - start);
      }
      (void)reader->Finish();
    });
  }
  for (std::thread& t : threads) t.join();
  return {{"prompt_tokens", tokens},
          {"ttft_p50_ms", Percentile(ttft, 0.5)},
          {"ttft_p99_ms", Percentile(ttft, 0.99)}};
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
  std::vector<size_t> gaps;
  out["baseline"] = Run(**serve, o, "", solo, &gaps);
  const double base_p99 = out["baseline"]["stall_p99_ms"].get<double>();
  for (const char* role : {"engine", "scheduler"}) {
    // A restarted scheduler counts from zero the resubmissions it took.
    const int64_t before =
        std::string(role) == "scheduler" ? 0 : RecomputedTokens(**serve);
    nlohmann::json j = Run(**serve, o, role, solo, &gaps);
    j["recomputed_tokens"] = RecomputedTokens(**serve) - before;
    j["recompute_floor"] = RecomputeFloor(**serve, o, solo, gaps);
    if (j["recompute_floor"].contains("ttft_p50_ms")) {
      const double floor = j["recompute_floor"]["ttft_p50_ms"].get<double>();
      j["stall_p50_over_recompute_floor_p50"] =
          floor > 0 ? j["stall_p50_ms"].get<double>() / floor : 0;
    }
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
