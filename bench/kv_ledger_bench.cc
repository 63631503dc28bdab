// KV ledger benchmark: how many sequences are admitted at once from a fixed
// KV pool when 32 requests share a 1,536-token system prompt, before (each
// request's prompt counted in full, as the policy did before the ledger) and
// after (the scheduler's KvLedger finds the shared prefix at admission and
// counts its pages once), in the same run. Prints one JSON object:
//   "policy": the pure Policy over a fixed pool (page size 16, --pages),
//             requests of 1,536 shared + --own unique tokens;
//   "serve":  the real three processes (`pdserve serve`, SmolLM2 by
//             default) with --kv-memory fixed, 32 concurrent streams, the
//             peak of the scheduler's running count (polled) and every
//             stream's status; before = --no-prefix-cache (the engine keeps
//             no prefixes, so the ledger shares none), after = default.
// Ratios are after / before, same pool, same run. The default --kv-memory
// 200M is a pool of 568 16-token pages with the default bf16 KV cache (the
// "pool_pages" figure says which pool a run had): 5 full prompts fit.
//
//   kv_ledger_bench [--model PATH] [--threads N] [--kv-memory 200M]
//                   [--pages 568] [--own 64] [--max-tokens 16] [--only policy]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_flags.h"
#include "nlohmann/json.hpp"
#include "scheduler/policy.h"
#include "tests/integration/serve_harness.h"

namespace pdserve::testing {
namespace {

constexpr int kRequests = 32;
constexpr int kSharedTokens = 1536;

struct Options {
  std::string model, threads = "2", kv_memory = "200M";
  int pages = 568, own = 64, max_tokens = 16;
};

// Prompt `i`: the shared system prompt, then `own` tokens of its own.
std::vector<int32_t> Prompt(int i, int own) {
  std::vector<int32_t> p;
  for (int t = 0; t < kSharedTokens; ++t) p.push_back(100 + (t * 7) % 20000);
  for (int t = 0; t < own; ++t) p.push_back(21000 + i * 97 + t);
  return p;
}

// The policy alone: plans and commits steps until every request has been
// admitted once (each finishes after `max_new` tokens); returns the peak of
// sequences running at once.
int64_t PolicyPeak(const Options& o, bool ledger_prefix) {
  scheduler::PoolGeometry pool{16, o.pages, 8192};
  pool.prefix_cache = ledger_prefix;
  scheduler::Policy p({.step_token_budget = 512, .prefill_chunk = 256,
                       .max_running = 64},
                      pool);
  for (int i = 0; i < kRequests; ++i) {
    scheduler::RequestSpec r{static_cast<SequenceId>(i + 1), 0,
                             kSharedTokens + o.own, o.max_tokens};
    r.prompt_tokens = Prompt(i, o.own);
    if (!p.Submit(r).ok()) return -1;
  }
  int64_t peak = 0;
  for (int step = 0; step < 100000 && !p.idle(); ++step) {
    p.Plan();
    p.Commit({});
    peak = std::max(peak, p.running());
  }
  return peak;
}

nlohmann::json PolicyPart(const Options& o) {
  const int64_t before = PolicyPeak(o, false), after = PolicyPeak(o, true);
  return {{"pages", o.pages},
          {"page_size", 16},
          {"admitted_at_once_before", before},
          {"admitted_at_once_after", after},
          {"ratio", before > 0 ? static_cast<double>(after) / before : 0.0}};
}

// The real processes: 32 concurrent streams; the scheduler's running count
// polled every 2 ms. Returns {peak, streams ok, seconds}.
nlohmann::json ServeRun(const Options& o, bool prefix_cache) {
  std::vector<std::string> args = {"--model",     o.model,   "--threads",
                                   o.threads,     "--kv-memory", o.kv_memory,
                                   "--max-running", "64",    "--http-port",
                                   "0"};
  if (!prefix_cache) args.push_back("--no-prefix-cache");
  auto serve = ServeInstance::Start(args, 300);
  if (!serve.ok()) return {{"error", std::string(serve.status().message())}};
  grpc::ClientContext info_ctx;
  v1::EngineInfo info;
  (void)(*serve)->EngineClient()->GetInfo(&info_ctx, {}, &info);
  const auto start = std::chrono::steady_clock::now();
  std::atomic<int> done{0}, ok{0};
  std::vector<std::thread> streams;
  for (int i = 0; i < kRequests; ++i) {
    streams.emplace_back([&, i] {
      v1::GenerateRequest req;
      for (int32_t t : Prompt(i, o.own)) req.add_prompt_ids(t);
      req.set_max_tokens(o.max_tokens);
      req.set_ignore_eos(true);
      GenerateResult r = Generate((*serve)->Client().get(), req);
      if (r.status.ok()) ok.fetch_add(1);
      done.fetch_add(1);
    });
  }
  int64_t peak = 0;
  auto sched = (*serve)->SchedulerClient();
  while (done.load() < kRequests) {
    grpc::ClientContext ctx;
    v1::SchedulerStatus s;
    if (sched->GetStatus(&ctx, {}, &s).ok()) {
      peak = std::max<int64_t>(peak, s.running());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (auto& t : streams) t.join();
  const double seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
                             .count();
  return {{"peak_running", peak},
          {"streams_ok", ok.load()},
          {"pool_pages", info.total_pages()},
          {"page_size", info.page_size()},
          {"seconds", seconds}};
}

nlohmann::json ServePart(const Options& o) {
  nlohmann::json before = ServeRun(o, false), after = ServeRun(o, true);
  nlohmann::json out = {{"kv_memory", o.kv_memory},
                        {"before_no_prefix_cache", before},
                        {"after_ledger", after}};
  if (before.contains("peak_running") && after.contains("peak_running") &&
      before["peak_running"].get<int64_t>() > 0) {
    out["ratio"] = after["peak_running"].get<double>() /
                   before["peak_running"].get<double>();
  }
  return out;
}

int Main(int argc, char** argv) {
  Options o;
  o.model = SmolLm2();
  std::string only;
  int threads = 2;
  bench::BenchFlags(
      "kv_ledger_bench [--model PATH] [--threads N] [--kv-memory 200M] "
      "[--pages 568] [--own 64] [--max-tokens 16] [--only policy]")
      .String("model", &o.model)
      .Int("threads", &threads, 1)
      .String("kv-memory", &o.kv_memory)
      .Int("pages", &o.pages, 1)
      .Int("own", &o.own, 1, 4096)
      .Int("max-tokens", &o.max_tokens, 1, 4096)
      .String("only", &only)
      .Parse(argc, argv);
  if (!only.empty() && only != "policy") {
    std::fprintf(stderr, "kv_ledger_bench: --only takes 'policy', got '%s'\n",
                 only.c_str());
    return 2;
  }
  o.threads = absl::StrCat(threads);
  nlohmann::json out;
  out["requests"] = kRequests;
  out["shared_prompt_tokens"] = kSharedTokens;
  out["own_tokens"] = o.own;
  out["policy"] = PolicyPart(o);
  if (only.empty()) {
    if (o.model.empty()) {
      std::fprintf(stderr, "kv_ledger_bench: no model (cache SmolLM2 or pass "
                           "--model), or --only policy\n");
      return 1;
    }
    out["model"] = o.model;
    out["serve"] = ServePart(o);
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace pdserve::testing

int main(int argc, char** argv) { return pdserve::testing::Main(argc, argv); }
