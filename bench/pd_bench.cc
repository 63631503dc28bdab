// Prefill/decode disaggregation on one machine (issue 17), printing one JSON
// object: the p50/p99 inter-token latency of `--streams` decode streams
// (short prompts) while `--long-tokens`-token prompts keep arriving, one
// after another, for as long as the streams run, in two configurations on
// the same --threads:
//   one_cell: `serve --cells 1` (chunked prefill, the adaptive budget);
//   pd:       `serve --cells 2 --prefill-cells 1` (the threads split: one
//             engine prefills the long prompts, the other decodes; their KV
//             is handed over).
// Also the long prompts' time to first token and how many ran. The figure
// to quote: pd.itl_p99_ms / one_cell.itl_p99_ms (below 1: the split helps).
//
//   pd_bench [--model PATH] [--threads N] [--streams N] [--decode-tokens N]
//            [--long-tokens N]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
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
using bench::Percentile;

struct Options {
  std::string model;
  int threads = 2, streams = 16, decode_tokens = 128, long_tokens = 2048;
};

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

v1::GenerateRequest Ids(int seed, int n, int max_tokens) {
  v1::GenerateRequest req;
  for (int i = 0; i < n; ++i) {
    req.add_prompt_ids(200 + (seed * 7919 + i * 104729) % 20000);
  }
  req.set_max_tokens(max_tokens);
  req.set_ignore_eos(true);
  req.set_return_token_ids(true);
  return req;
}

// Streams `req`; the arrival time of each delta's tokens.
grpc::Status Stream(const ServeInstance& serve, const v1::GenerateRequest& req,
                    std::vector<Clock::time_point>* times) {
  auto stub = serve.Client();
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    if (!resp.has_delta()) continue;
    const Clock::time_point now = Clock::now();
    for (int i = 0; i < resp.delta().token_ids_size(); ++i) {
      times->push_back(now);
    }
  }
  return reader->Finish();
}

nlohmann::json Run(const ServeInstance& serve, const Options& o) {
  std::vector<std::vector<Clock::time_point>> times(o.streams);
  std::atomic<int> running{o.streams}, failed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < o.streams; ++i) {
    threads.emplace_back([&, i] {
      if (!Stream(serve, Ids(i, 16, o.decode_tokens), &times[i]).ok()) {
        ++failed;
      }
      --running;
    });
  }
  // Long prompts, one after another, while the streams run.
  std::vector<double> ttft;
  std::thread arrivals([&] {
    for (int k = 0; running.load() > 0; ++k) {
      std::vector<Clock::time_point> t;
      const Clock::time_point start = Clock::now();
      if (!Stream(serve, Ids(1000 + k, o.long_tokens, 4), &t).ok() ||
          t.empty()) {
        ++failed;
        continue;
      }
      ttft.push_back(Ms(t[0] - start));
    }
  });
  for (std::thread& t : threads) t.join();
  arrivals.join();
  std::vector<double> gaps;
  for (const auto& t : times) {
    // From the second token on: the first is each stream's own TTFT.
    for (size_t k = 2; k < t.size(); ++k) gaps.push_back(Ms(t[k] - t[k - 1]));
  }
  return {{"itl_p50_ms", Percentile(gaps, 0.5)},
          {"itl_p99_ms", Percentile(gaps, 0.99)},
          {"long_prompts", ttft.size()},
          {"long_ttft_p50_ms", Percentile(ttft, 0.5)},
          {"failed", failed.load()}};
}

int Main(int argc, char** argv) {
  Options o;
  o.model = SmolLm2();
  bench::BenchFlags(
      "pd_bench [--model PATH] [--threads N] [--streams N] "
      "[--decode-tokens N] [--long-tokens N]")
      .String("model", &o.model)
      .Int("threads", &o.threads, 2)
      .Int("streams", &o.streams, 1, 256)
      .Int("decode-tokens", &o.decode_tokens, 8)
      .Int("long-tokens", &o.long_tokens, 16)
      .Parse(argc, argv);
  if (o.model.empty()) {
    std::fprintf(stderr, "pd_bench: no model (cache SmolLM2 or pass --model)\n");
    return 1;
  }
  nlohmann::json out;
  out["model"] = o.model;
  out["threads"] = o.threads;
  out["streams"] = o.streams;
  out["decode_tokens"] = o.decode_tokens;
  out["long_tokens"] = o.long_tokens;
  const std::vector<std::string> common = {
      "--model", o.model, "--kv-memory", "1G", "--threads",
      absl::StrCat(o.threads), "--max-step-tokens", "4096"};
  struct Config {
    const char* name;
    std::vector<std::string> extra;
  };
  const std::vector<Config> configs = {
      {"one_cell", {}},
      {"pd",
       {"--cells", "2", "--prefill-cells", "1", "--pd-min-prompt-tokens",
        absl::StrCat(o.long_tokens / 2)}}};
  for (const Config& c : configs) {
    std::vector<std::string> args = common;
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    auto serve = ServeInstance::Start(args);
    if (!serve.ok()) {
      std::fprintf(stderr, "pd_bench: %s: %s\n", c.name,
                   std::string(serve.status().message()).c_str());
      return 1;
    }
    out[c.name] = Run(**serve, o);
  }
  const double one = out["one_cell"]["itl_p99_ms"].get<double>();
  out["pd_itl_p99_over_one_cell"] =
      one > 0 ? out["pd"]["itl_p99_ms"].get<double>() / one : 0;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace pdserve::testing

int main(int argc, char** argv) { return pdserve::testing::Main(argc, argv); }
