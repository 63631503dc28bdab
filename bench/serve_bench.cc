// Serving benchmark over the three real processes (`pdserve serve`), printing
// one JSON object:
//  1. Chunked prefill at work: p99 inter-token latency of 8 decode streams
//     while one 2,048-token prompt prefills, divided by their p99 with no
//     prefill running, with chunking on (--chunk, default 256) and off.
//  2. Front end overhead: tokens/s streamed through gRPC (client clock)
//     divided by the engine's own rate over the same steps (its step times,
//     from the scheduler's --step-log).
//  3. Prefix caching: time to first token of a turn whose 1,536-token
//     system prompt is cached, divided by that of the first turn.
//
//   serve_bench [--model PATH] [--tokenizer PATH] [--threads N]
//               [--chunk N] [--budget N] [--decode-tokens N] [--itl-slowdown X]
//               [--only streaming]
// Three configurations: chunked with the budget adapted to step costs
// (--itl-slowdown, default 1.5), chunked with a fixed budget, chunking off.
// The model defaults to the cached SmolLM2-135M-Instruct; its context must
// hold the 2,048-token prompt.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_flags.h"
#include "bench/percentile.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve_harness.h"

namespace pdserve::testing {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model, tokenizer, threads = "0";
  int chunk = 256, budget = 512, decode_tokens = 96;
  double slowdown = 1.5;
};

using bench::Percentile;

// Streams one request; appends token arrival times (one entry per token).
grpc::Status StreamTimes(v1::Inference::Stub* stub,
                         const v1::GenerateRequest& req,
                         std::vector<Clock::time_point>* times) {
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    if (!resp.has_delta()) continue;
    const auto now = Clock::now();
    for (int i = 0; i < resp.delta().token_ids_size(); ++i)
      times->push_back(now);
  }
  return reader->Finish();
}

v1::GenerateRequest Request(const std::string& prompt, int max_tokens) {
  v1::GenerateRequest req;
  req.set_prompt(prompt);
  req.set_max_tokens(max_tokens);
  req.set_return_token_ids(true);
  return req;
}

std::string LongPrompt(v1::Inference::Stub* stub, int tokens) {
  // Grow a text until it tokenizes to exactly `tokens` ids (or just under).
  std::string unit =
      "The quick brown fox jumps over the lazy dog near the river bank. ";
  std::string text;
  for (int i = 0; i < tokens; ++i) text += unit;
  grpc::ClientContext ctx;
  v1::TokenizeRequest req;
  req.set_text(text);
  v1::TokenizeResponse resp;
  if (!stub->Tokenize(&ctx, req, &resp).ok()) return "";
  grpc::ClientContext ctx2;
  v1::DetokenizeRequest dreq;
  for (int i = 0; i < tokens - 1 && i < resp.token_ids_size(); ++i) {
    dreq.add_token_ids(resp.token_ids(i));
  }
  v1::DetokenizeResponse dresp;
  if (!stub->Detokenize(&ctx2, dreq, &dresp).ok()) return "";
  return dresp.text();
}

// 8 decode streams; with `prefill_prompt`, one long prompt joins once they
// have produced a few tokens. Returns the streams' inter-token gaps (ms).
std::vector<double> DecodeItls(const ServeInstance& serve, int decode_tokens,
                               const std::string& prefill_prompt) {
  std::vector<std::vector<Clock::time_point>> times(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto stub = serve.Client();
      StreamTimes(
          stub.get(),
          Request(absl::StrCat("Story number ", i, ": once upon a time"),
                  decode_tokens),
          &times[i]);
    });
  }
  if (!prefill_prompt.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto stub = serve.Client();
    std::vector<Clock::time_point> t;
    grpc::Status s = StreamTimes(stub.get(), Request(prefill_prompt, 1), &t);
    if (!s.ok())
      std::fprintf(stderr, "prefill request: %s\n", s.error_message().c_str());
  }
  for (auto& t : threads) t.join();
  std::vector<double> gaps;
  for (const auto& t : times) {
    for (size_t k = 1; k < t.size(); ++k) {
      gaps.push_back(
          std::chrono::duration<double, std::milli>(t[k] - t[k - 1]).count());
    }
  }
  return gaps;
}

std::unique_ptr<ServeInstance> Start(const Options& o, int chunk,
                                     const std::string& step_log,
                                     double slowdown = 0) {
  std::vector<std::string> args = {"--model",           o.model,
                                   "--chunk",           absl::StrCat(chunk),
                                   "--budget",          absl::StrCat(o.budget),
                                   "--kv-memory",       "1G",
                                   "--max-step-tokens", "4096",
                                   "--itl-slowdown",    absl::StrCat(slowdown)};
  if (!o.tokenizer.empty())
    args.insert(args.end(), {"--tokenizer", o.tokenizer});
  if (o.threads != "0") args.insert(args.end(), {"--threads", o.threads});
  if (!step_log.empty()) args.insert(args.end(), {"--step-log", step_log});
  auto s = ServeInstance::Start(args, 300);
  if (!s.ok()) {
    std::fprintf(stderr, "serve: %s\n",
                 std::string(s.status().message()).c_str());
    return nullptr;
  }
  return std::move(*s);
}

nlohmann::json PrefillInterference(const Options& o, int chunk,
                                   double slowdown) {
  auto serve = Start(o, chunk, "", slowdown);
  if (!serve) return {{"error", "serve failed"}};
  auto stub = serve->Client();
  const std::string prompt = LongPrompt(stub.get(), 2048);
  DecodeItls(*serve, 16, "");  // warm-up
  std::vector<double> base = DecodeItls(*serve, o.decode_tokens, "");
  std::vector<double> with = DecodeItls(*serve, o.decode_tokens, prompt);
  const double p99_base = Percentile(base, 0.99),
               p99_with = Percentile(with, 0.99);
  return {{"chunk", chunk},
          {"itl_slowdown", slowdown},
          {"itl_p50_ms_no_prefill", Percentile(base, 0.5)},
          {"itl_p99_ms_no_prefill", p99_base},
          {"itl_p50_ms_with_prefill", Percentile(with, 0.5)},
          {"itl_p99_ms_with_prefill", p99_with},
          {"itl_max_ms_with_prefill", Percentile(with, 1.0)},
          {"p99_ratio", p99_base > 0 ? p99_with / p99_base : 0}};
}

// Automatic prefix caching: time to first token of a chat turn whose
// 1,536-token system prompt an earlier turn already prefilled, against the
// first turn (nothing cached) in the same run. Three systems, median ratio.
nlohmann::json PrefixCacheTtft(const Options& o) {
  auto serve = Start(o, o.chunk, "");
  if (!serve) return {{"error", "serve failed"}};
  auto stub = serve->Client();
  std::vector<Clock::time_point> warm;
  StreamTimes(stub.get(), Request("Hello there", 4), &warm);
  const std::string base = LongPrompt(stub.get(), 1536);
  auto ttft_ms = [&](const std::string& system, const std::string& question) {
    v1::GenerateRequest req;
    req.set_max_tokens(1);
    auto* s = req.add_messages();
    s->set_role("system");
    s->set_content(system);
    auto* u = req.add_messages();
    u->set_role("user");
    u->set_content(question);
    // One token: the whole call is the time to the first token (it also
    // counts a reply that ends at once with end-of-sequence).
    std::vector<Clock::time_point> t;
    const auto start = Clock::now();
    if (!StreamTimes(stub.get(), req, &t).ok()) return -1.0;
    return std::chrono::duration<double, std::milli>(Clock::now() - start)
        .count();
  };
  std::vector<double> cold, warm_ms, ratios, loaded_ms;
  for (int i = 0; i < 3; ++i) {
    const std::string system = absl::StrCat("System ", i, ". ", base);
    cold.push_back(ttft_ms(system, "What is the first word?"));
    warm_ms.push_back(ttft_ms(system, "And the last word?"));
    if (cold.back() <= 0 || warm_ms.back() <= 0) return {{"error", "no token"}};
    ratios.push_back(warm_ms.back() / cold.back());
  }
  // The same cached turn while 8 streams decode: the adaptive step budget
  // then leaves little room for prefill, which cached tokens must not use.
  for (int i = 0; i < 3; ++i) {
    const std::string system = absl::StrCat("System ", i, ". ", base);
    std::vector<std::thread> streams;
    std::vector<std::vector<Clock::time_point>> times(8);
    for (int k = 0; k < 8; ++k) {
      streams.emplace_back([&, k] {
        auto s = serve->Client();
        StreamTimes(s.get(), Request(absl::StrCat("Story ", k, ": once"), 96),
                    &times[k]);
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    loaded_ms.push_back(ttft_ms(system, "And the second word?"));
    for (auto& t : streams) t.join();
  }
  // A second chat turn (system, question, the model's streamed reply, a
  // new question): the share of its prompt served from cached pages, which
  // shows whether the re-tokenized reply lines up with the generated ids.
  auto engine = serve->EngineClient();
  auto hits = [&](int64_t* queries) {
    grpc::ClientContext ctx;
    v1::EngineInfo info;
    (void)engine->GetInfo(&ctx, v1::GetInfoRequest(), &info);
    *queries = info.prefix_cache_query_tokens();
    return info.prefix_cache_hit_tokens();
  };
  v1::GenerateRequest turn;
  turn.set_max_tokens(64);
  for (const auto& [role, text] :
       {std::pair<std::string, std::string>{"system",
                                            "You are a helpful "
                                            "assistant."},
        {"user", "Write a short story about a lighthouse keeper."}}) {
    auto* m = turn.add_messages();
    m->set_role(role);
    m->set_content(text);
  }
  GenerateResult first = Generate(stub.get(), turn);
  auto* reply = turn.add_messages();
  reply->set_role("assistant");
  reply->set_content(first.text);
  auto* next = turn.add_messages();
  next->set_role("user");
  next->set_content("Now give the story a title.");
  turn.set_max_tokens(1);
  int64_t q0 = 0, q1 = 0;
  const int64_t h0 = hits(&q0);
  (void)Generate(stub.get(), turn);
  const int64_t h1 = hits(&q1);
  return {{"system_prompt_tokens", 1536},
          {"ttft_ms_first_turn", cold},
          {"ttft_ms_cached_system", warm_ms},
          {"cached_over_first_median", Percentile(ratios, 0.5)},
          {"ttft_ms_cached_system_8_streams_decoding", loaded_ms},
          {"second_chat_turn_prompt_tokens", q1 - q0},
          {"second_chat_turn_cached_fraction",
           q1 > q0 ? static_cast<double>(h1 - h0) / (q1 - q0) : 0.0}};
}

nlohmann::json StreamedVsEngine(const Options& o) {
  const std::string log = "/tmp/pdserve-serve-bench-steps.csv";
  auto serve = Start(o, o.chunk, log);
  if (!serve) return {{"error", "serve failed"}};
  auto stub = serve->Client();
  std::vector<Clock::time_point> warm;
  StreamTimes(stub.get(), Request("Hello there", 8), &warm);
  std::ifstream before_in(log);
  std::string line;
  int64_t skip = 0;
  while (std::getline(before_in, line)) ++skip;
  std::vector<Clock::time_point> t;
  const auto start = Clock::now();
  // A chat turn: the instruct model answers at length (a raw prompt may
  // end at once with EOS).
  v1::GenerateRequest story;
  story.set_max_tokens(256);
  story.set_return_token_ids(true);
  auto* m = story.add_messages();
  m->set_role("user");
  m->set_content("Write a long story about a dragon who learns to bake bread.");
  StreamTimes(stub.get(), story, &t);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // log flush
  // Engine time of this request's decode steps (prefill step excluded, as
  // the streamed rate starts at the first token).
  std::ifstream in(log);
  double engine_ms = 0;
  int64_t decode_steps = 0, row = 0;
  while (std::getline(in, line)) {
    if (row++ < skip) continue;
    std::vector<std::string> f = absl::StrSplit(line, ',');
    if (f.size() != 3 || f[0] != "0") continue;
    engine_ms += std::stod(f[2]);
    ++decode_steps;
  }
  if (t.size() < 2 || engine_ms <= 0) return {{"error", "no tokens streamed"}};
  const double stream_s =
      std::chrono::duration<double>(t.back() - t.front()).count();
  const double streamed = (t.size() - 1) / stream_s;
  const double engine = decode_steps / (engine_ms / 1000.0);
  return {
      {"tokens", t.size()},
      {"ttft_ms",
       std::chrono::duration<double, std::milli>(t.front() - start).count()},
      {"streamed_tok_per_s", streamed},
      {"engine_tok_per_s", engine},
      {"ratio", streamed / engine}};
}

int Main(int argc, char** argv) {
  Options o;
  o.model = SmolLm2();
  std::string only;
  int threads = 0;
  bench::BenchFlags(
      "serve_bench [--model PATH] [--tokenizer PATH] [--threads N] "
      "[--chunk N] [--budget N] [--decode-tokens N] [--itl-slowdown X] "
      "[--only streaming]")
      .String("model", &o.model)
      .String("tokenizer", &o.tokenizer)
      .Int("threads", &threads, 0)
      .Int("chunk", &o.chunk, 1)
      .Int("budget", &o.budget, 1)
      .Int("decode-tokens", &o.decode_tokens, 8)
      .Double("itl-slowdown", &o.slowdown, 0)
      .String("only", &only)
      .Parse(argc, argv);
  if (!only.empty() && only != "streaming") {
    std::fprintf(stderr, "serve_bench: --only takes 'streaming', got '%s'\n",
                 only.c_str());
    return 2;
  }
  const bool only_streaming = !only.empty();
  o.threads = absl::StrCat(threads);
  if (o.model.empty()) {
    std::fprintf(stderr,
                 "serve_bench: no model (cache SmolLM2 or pass --model)\n");
    return 1;
  }
  nlohmann::json out;
  out["model"] = o.model;
  out["prefill_tokens"] = 2048;
  out["decode_streams"] = 8;
  out["streaming"] = StreamedVsEngine(o);
  out["prefix_cache"] = PrefixCacheTtft(o);
  if (!only_streaming) {
    out["chunked_adaptive"] = PrefillInterference(o, o.chunk, o.slowdown);
    out["chunked_fixed"] = PrefillInterference(o, o.chunk, 0);
    out["unchunked"] = PrefillInterference(o, 0, 0);
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace pdserve::testing

int main(int argc, char** argv) { return pdserve::testing::Main(argc, argv); }
