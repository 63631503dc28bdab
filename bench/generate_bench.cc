// Generation throughput harness: prefill (a P-token prompt, in chunks of C
// tokens) and batch-1 decode (D tokens, one forward pass each, starting at
// context depth `depth`) tokens/s for each model file and thread count,
// printed as one JSON document on stdout.
//
//   generate_bench --model A.gguf [--model B.gguf ...] [--threads 1,2]
//                  [--prompt-tokens 512] [--decode-tokens 128] [--repeat 2]
//                  [--depth N] [--chunk N] [--kv-dtype bf16]
//
// --depth: context the decode starts from (default: the prompt, i.e. decode
// right after the timed prefill); a different depth is filled untimed.
// --chunk: prefill chunk, tokens per forward pass (default: the prompt).
// --decode-tokens 0 measures prefill only.
// --kv-dtype: the KV cache's storage, f32|f16|bf16|q8_0 (default bf16, the
// CPU engine's default).
//
// Each figure is the best of --repeat runs (after one warm-up pass that
// pages the weights in); every run's seconds are listed too. Prompt ids are
// synthetic (speed does not depend on which ids they are). Per (model,
// threads) it also reports the bytes one decode token reads (weights + KV,
// from the forward pass's counters) and the process's resident memory: the
// peak (VmHWM, reset before the first prefill where the kernel allows)
// against the mapped weight bytes and the KV bytes written by the prefill.
// bench/cpu_compare.py runs this next to llama.cpp and ik_llama.cpp.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/loader/model_loader.h"
#include "engine/model/attention_tiled.h"
#include "engine/model/sequence_runner.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

struct Args {
  std::vector<std::string> models;
  std::vector<int> threads = {1, 2};
  int64_t prompt_tokens = 512;
  int64_t decode_tokens = 128;
  int64_t depth = -1;  // -1: the prompt
  int64_t chunk = -1;  // -1: the prompt
  int repeat = 2;
  KvDType kv_dtype = KvDType::kBF16;
};

bool ParseInt(const std::string& v, int64_t min, int64_t* out) {
  return absl::SimpleAtoi(v, out) && *out >= min;
}

bool Parse(int argc, char** argv, Args* a) {
  bool threads_set = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return false;
    const std::string v = argv[++i];
    bool ok = true;
    if (arg == "--model") {
      a->models.push_back(v);
    } else if (arg == "--threads") {
      if (!threads_set) a->threads.clear();
      threads_set = true;
      for (absl::string_view p : absl::StrSplit(v, ',', absl::SkipEmpty())) {
        int t;
        if (!absl::SimpleAtoi(p, &t) || t < 1) return false;
        a->threads.push_back(t);
      }
    } else if (arg == "--prompt-tokens") {
      ok = ParseInt(v, 1, &a->prompt_tokens);
    } else if (arg == "--decode-tokens") {
      ok = ParseInt(v, 0, &a->decode_tokens);
    } else if (arg == "--depth") {
      ok = ParseInt(v, 0, &a->depth);
    } else if (arg == "--chunk") {
      ok = ParseInt(v, 1, &a->chunk);
    } else if (arg == "--kv-dtype") {
      auto d = ParseKvDType(v);
      ok = d.ok();
      if (ok) a->kv_dtype = *d;
    } else if (arg == "--repeat") {
      ok = absl::SimpleAtoi(v, &a->repeat) && a->repeat >= 1;
    } else {
      return false;
    }
    if (!ok) return false;
  }
  if (a->depth < 0) a->depth = a->prompt_tokens;
  if (a->chunk < 0) a->chunk = a->prompt_tokens;
  return !a->models.empty() && !a->threads.empty();
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

// A "VmRSS:"-style field of /proc/self/status in bytes; -1 when unreadable.
int64_t ProcStatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) != 0) continue;
    int64_t kb = 0;
    std::vector<std::string> parts =
        absl::StrSplit(line.substr(field.size()), absl::ByAnyChar(" \t"),
                       absl::SkipEmpty());
    if (!parts.empty() && absl::SimpleAtoi(parts[0], &kb)) return kb * 1024;
  }
  return -1;
}

// Resets VmHWM to the current RSS (Linux: "5" > /proc/self/clear_refs).
bool ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

// Feeds `n` prompt tokens from position 0 in chunks; the logits of the last.
absl::StatusOr<absl::Span<const float>> Prefill(
    SequenceRunner& r, const std::vector<int32_t>& prompt, int64_t n) {
  r.Reset();
  return r.Feed(absl::MakeConstSpan(prompt).subspan(0, n));
}

// One (model, threads) measurement, as a JSON row; an error names its cause.
absl::StatusOr<nlohmann::json> Measure(const ModelWeights& w,
                                       const std::string& path, int threads,
                                       const Args& args,
                                       int64_t rss_before_load) {
  const ModelConfig& c = w.config;
  const int64_t longest = std::max(args.prompt_tokens, args.depth);
  std::vector<int32_t> prompt(longest);
  for (int64_t i = 0; i < longest; ++i) {
    prompt[i] = static_cast<int32_t>((i * 7919 + 17) % c.vocab_size);
  }
  ThreadPool pool(threads);
  const int64_t capacity =
      std::max(args.prompt_tokens, args.depth + args.decode_tokens);
  auto runner =
      SequenceRunner::Create(w, pool, capacity, args.chunk, args.kv_dtype);
  if (!runner.ok()) return runner.status();
  SequenceRunner& r = **runner;
  (void)r.Feed(absl::MakeConstSpan(prompt).subspan(
      0, std::min<int64_t>(16, args.prompt_tokens)));  // warm-up
  const bool hwm_reset = ResetPeakRss();
  std::vector<double> prefill_s, decode_s;
  ForwardStats prefill_stats, decode_stats;
  int64_t hwm_after_prefill = -1;
  for (int rep = 0; rep < args.repeat; ++rep) {
    const ForwardStats s0 = r.stats();
    auto t0 = std::chrono::steady_clock::now();
    auto logits = Prefill(r, prompt, args.prompt_tokens);
    if (!logits.ok()) return logits.status();
    prefill_s.push_back(Since(t0));
    if (rep == 0) {
      hwm_after_prefill = ProcStatusBytes("VmHWM:");
      prefill_stats = r.stats();
      prefill_stats.kv_bytes_written -= s0.kv_bytes_written;
    }
    if (args.decode_tokens == 0) continue;
    if (args.depth != args.prompt_tokens) {
      logits = Prefill(r, prompt, args.depth);  // untimed
      if (!logits.ok()) return logits.status();
    }
    const ForwardStats d0 = r.stats();
    int32_t token = 0;
    t0 = std::chrono::steady_clock::now();
    for (int64_t d = 0; d < args.decode_tokens; ++d) {
      // Greedy, with the engine's own vector ArgMax (what its greedy
      // sampler runs; std::max_element's compare chain cost ~110 us).
      token = static_cast<int32_t>(ArgMax(logits->data(), c.vocab_size));
      logits = r.Feed({&token, 1});
      if (!logits.ok()) return logits.status();
    }
    decode_s.push_back(Since(t0));
    if (rep == 0) {
      const ForwardStats& d1 = r.stats();
      decode_stats.weight_bytes_read = d1.weight_bytes_read - d0.weight_bytes_read;
      decode_stats.kv_bytes_read = d1.kv_bytes_read - d0.kv_bytes_read;
    }
  }
  const double best_prefill = *std::min_element(prefill_s.begin(), prefill_s.end());
  nlohmann::json row;
  row["model"] = path;
  row["weights_type"] = DTypeName(w.layers[0].wq.type);
  row["threads"] = threads;
  row["prompt_tokens"] = args.prompt_tokens;
  row["chunk"] = args.chunk;
  row["kv_dtype"] = KvDTypeName(args.kv_dtype);
  row["kv_bytes_per_token"] = r.kv().bytes_per_token_per_layer() *
                              r.kv().num_layers();
  row["prefill_tok_s"] = args.prompt_tokens / best_prefill;
  row["prefill_s"] = best_prefill;
  row["prefill_s_runs"] = prefill_s;
  if (!decode_s.empty()) {
    const double best_decode = *std::min_element(decode_s.begin(), decode_s.end());
    const double n = static_cast<double>(args.decode_tokens);
    row["depth"] = args.depth;
    row["decode_tokens"] = args.decode_tokens;
    row["decode_tok_s"] = n / best_decode;
    row["decode_s"] = best_decode;
    row["decode_s_runs"] = decode_s;
    row["decode_weight_bytes_per_token"] = decode_stats.weight_bytes_read / n;
    row["decode_kv_bytes_per_token"] = decode_stats.kv_bytes_read / n;
  }
  // Resident memory: the prefill's peak beyond the weights and its KV.
  const int64_t kv_bytes = prefill_stats.kv_bytes_written;
  row["weight_bytes"] = w.weight_bytes;
  row["prefill_kv_bytes"] = kv_bytes;
  row["rss_before_load_bytes"] = rss_before_load;
  row["peak_rss_bytes"] = hwm_after_prefill;
  row["peak_rss_reset"] = hwm_reset;
  if (hwm_after_prefill > 0 && rss_before_load > 0) {
    row["prefill_peak_beyond_weights_kv_bytes"] =
        hwm_after_prefill - rss_before_load - w.weight_bytes - kv_bytes;
  }
  return row;
}

int Main(int argc, char** argv) {
  Args args;
  if (!Parse(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: generate_bench --model PATH [--model PATH ...] "
                 "[--threads 1,2] [--prompt-tokens 512] [--decode-tokens 128] "
                 "[--repeat 2] [--depth N] [--chunk N] "
                 "[--kv-dtype f32|f16|bf16|q8_0]\n");
    return 2;
  }
  nlohmann::json out;
  out["isa"] = MatMulIsa();
  out["prompt_tokens"] = args.prompt_tokens;
  out["decode_tokens"] = args.decode_tokens;
  out["depth"] = args.depth;
  out["chunk"] = args.chunk;
  out["kv_dtype"] = KvDTypeName(args.kv_dtype);
  out["attention_isa"] = AttendTiledIsa();
  out["results"] = nlohmann::json::array();
  for (const std::string& path : args.models) {
    const int64_t rss_before_load = ProcStatusBytes("VmRSS:");
    auto weights = LoadModel(path);
    if (!weights.ok()) {
      std::fprintf(stderr, "generate_bench: %s\n",
                   std::string(weights.status().message()).c_str());
      return 1;
    }
    for (int threads : args.threads) {
      auto row = Measure(**weights, path, threads, args, rss_before_load);
      if (!row.ok()) {
        std::fprintf(stderr, "generate_bench: %s\n",
                     std::string(row.status().message()).c_str());
        return 1;
      }
      out["results"].push_back(*row);
      std::fprintf(stderr, "%s threads=%d prefill %.1f tok/s decode %.1f tok/s\n",
                   path.c_str(), threads, (*row)["prefill_tok_s"].get<double>(),
                   row->value("decode_tok_s", 0.0));
    }
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) { return pdserve::Main(argc, argv); }
