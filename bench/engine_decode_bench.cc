// Aggregate decode throughput of EngineCore at several batch sizes, and the
// KV pool's resident memory against the tokens written.
//
//   engine_decode_bench [--model PATH]... [--threads 2] [--batches 1,4,16,64]
//                       [--prompt 32] [--steps 32] [--max-seq-len 2048]
//
// Defaults: the SmolLM2-135M-Instruct Q4_1 and Q8_0 GGUF files in
// $PDSERVE_CACHE/models (default ~/.cache/pdserve/models); missing files are
// reported and skipped. Prints one JSON object per line: one per (model,
// batch) run, then a summary per model with the batch-16 / batch-1 ratio
// (the floor is 3.5).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/core/engine_core.h"
#include "engine/loader/model_loader.h"
#include "engine/model/sampler.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"

namespace pdserve {
namespace {

struct Flags {
  std::vector<std::string> models;
  int threads = 2;
  std::vector<int> batches = {1, 4, 16, 64};
  int prompt = 32;
  int steps = 32;
  int64_t max_seq_len = 2048;
};

std::string CacheModelDir() {
  const char* cache = std::getenv("PDSERVE_CACHE");
  if (cache != nullptr && *cache != '\0') {
    return std::string(cache) + "/models";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.cache/pdserve/models";
}

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") {
      f->models.push_back(next("--model"));
    } else if (a == "--threads") {
      if (!absl::SimpleAtoi(next("--threads"), &f->threads)) return false;
    } else if (a == "--prompt") {
      if (!absl::SimpleAtoi(next("--prompt"), &f->prompt)) return false;
    } else if (a == "--steps") {
      if (!absl::SimpleAtoi(next("--steps"), &f->steps)) return false;
    } else if (a == "--max-seq-len") {
      if (!absl::SimpleAtoi(next("--max-seq-len"), &f->max_seq_len)) {
        return false;
      }
    } else if (a == "--batches") {
      f->batches.clear();
      for (absl::string_view b : absl::StrSplit(next("--batches"), ',')) {
        int v = 0;
        if (!absl::SimpleAtoi(b, &v) || v < 1) return false;
        f->batches.push_back(v);
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return false;
    }
  }
  if (f->models.empty()) {
    const std::string dir = CacheModelDir();
    f->models = {dir + "/SmolLM2-135M-Instruct.Q4_1.gguf",
                 dir + "/SmolLM2-135M-Instruct.Q8_0.gguf"};
  }
  return f->threads >= 1 && f->prompt >= 1 && f->steps >= 1;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct RunResult {
  double decode_tok_s = 0;         // batch * steps / wall time of the steps
  double median_decode_tok_s = 0;  // batch / median step time
  double best_decode_tok_s = 0;    // batch / fastest step (least disturbed)
  double step_ms = 0;
  double bandwidth_gb_s = 0;
  double forward_ms = 0;  // mean per step
  double sample_ms = 0;
};

// Admits `batch` sequences, prefills them, then times `steps` decode steps
// of the whole batch.
absl::StatusOr<RunResult> RunBatch(std::shared_ptr<const ModelWeights> model,
                                   ThreadPool& threads, const Flags& f,
                                   int batch, const std::string& path) {
  EngineOptions o;
  // Enough for every sequence at full capacity: only touched pages cost
  // memory, which the output shows.
  o.kv_memory.bytes = static_cast<int64_t>(batch) * f.max_seq_len *
                          model->config.num_layers * model->config.kv_dim() *
                          2 * 4 +
                      (64 << 20);
  o.max_sequences = batch;
  o.max_step_tokens = std::max(batch * f.prompt, batch);
  absl::StatusOr<std::unique_ptr<EngineCore>> created =
      EngineCore::Create(model, &threads, o);
  if (!created.ok()) return created.status();
  EngineCore& e = **created;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> tok(
      10, static_cast<int32_t>(model->config.vocab_size - 1));
  SamplingParams greedy;
  std::vector<StepPlanEntry> plan;
  for (int b = 0; b < batch; ++b) {
    std::vector<int32_t> prompt(f.prompt);
    for (int32_t& t : prompt) t = tok(rng);
    absl::Status s = e.AddSequence(b, prompt, f.max_seq_len, greedy, {},
                                   f.steps + 8);
    if (!s.ok()) return s;
    plan.push_back({static_cast<SequenceId>(b), f.prompt});
  }
  StepResult r;
  if (absl::Status s = e.Step(plan, &r); !s.ok()) return s;
  for (StepPlanEntry& p : plan) p.num_tokens = 1;
  if (absl::Status s = e.Step(plan, &r); !s.ok()) return s;  // warm-up
  int64_t bytes = 0, forward_ns = 0, sample_ns = 0;
  std::vector<int64_t> step_ns;
  step_ns.reserve(f.steps);
  const int64_t t0 = NowNs();
  for (int i = 0; i < f.steps; ++i) {
    const int64_t s0 = NowNs();
    if (absl::Status s = e.Step(plan, &r); !s.ok()) return s;
    step_ns.push_back(NowNs() - s0);
    bytes += r.weight_bytes_read + r.kv_bytes_read + r.kv_bytes_written;
    forward_ns += r.forward_ns;
    sample_ns += r.sample_ns;
  }
  const int64_t t1 = NowNs();
  const double secs = (t1 - t0) * 1e-9;
  RunResult out;
  out.decode_tok_s = batch * f.steps / secs;
  out.step_ms = secs * 1e3 / f.steps;
  out.bandwidth_gb_s = bytes / secs * 1e-9;
  out.forward_ms = forward_ns * 1e-6 / f.steps;
  std::sort(step_ns.begin(), step_ns.end());
  out.median_decode_tok_s = batch / (step_ns[step_ns.size() / 2] * 1e-9);
  out.best_decode_tok_s = batch / (step_ns.front() * 1e-9);
  out.sample_ms = sample_ns * 1e-6 / f.steps;

  const EngineStats st = e.Stats();
  const KvGeometry& g = e.Geometry();
  const int64_t capacity_bytes =
      static_cast<int64_t>(batch) * f.max_seq_len * g.bytes_per_token;
  std::printf(
      "{\"model\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"batch\": %d, "
      "\"prompt\": %d, \"decode_steps\": %d, \"decode_tok_s\": %.1f, "
      "\"median_decode_tok_s\": %.1f, \"best_decode_tok_s\": %.1f, "
      "\"step_ms\": %.2f, \"forward_ms\": %.2f, \"sample_ms\": %.3f, "
      "\"bytes_moved_gb_s\": %.2f, "
      "\"kv_tokens_written\": %lld, \"kv_bytes_per_token\": %lld, "
      "\"kv_used_pages\": %lld, \"kv_used_bytes\": %lld, "
      "\"kv_resident_bytes\": %lld, \"kv_written_bytes\": %lld, "
      "\"max_seq_len\": %lld, \"kv_capacity_bytes_if_preallocated\": %lld}\n",
      path.c_str(), MatMulIsa(), threads.num_threads(), batch, f.prompt,
      f.steps, out.decode_tok_s, out.median_decode_tok_s,
      out.best_decode_tok_s, out.step_ms, out.forward_ms, out.sample_ms,
      out.bandwidth_gb_s,
      static_cast<long long>(st.pool.used_tokens),
      static_cast<long long>(g.bytes_per_token),
      static_cast<long long>(st.pool.used_pages),
      static_cast<long long>(st.pool.used_bytes),
      static_cast<long long>(e.ResidentBytes()),
      static_cast<long long>(st.pool.used_tokens * g.bytes_per_token),
      static_cast<long long>(f.max_seq_len),
      static_cast<long long>(capacity_bytes));
  std::fflush(stdout);
  for (int b = 0; b < batch; ++b) (void)e.Release(b);
  const EngineStats after = e.Stats();
  std::printf(
      "{\"model\": \"%s\", \"batch\": %d, \"after_release\": true, "
      "\"kv_used_pages\": %lld, \"kv_resident_bytes\": %lld}\n",
      path.c_str(), batch, static_cast<long long>(after.pool.used_pages),
      static_cast<long long>(e.ResidentBytes()));
  return out;
}

int Main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, &f)) {
    std::fprintf(stderr,
                 "usage: engine_decode_bench [--model PATH]... [--threads N] "
                 "[--batches 1,4,16,64] [--prompt N] [--steps N] "
                 "[--max-seq-len N]\n");
    return 2;
  }
  ThreadPool threads(f.threads);
  int failures = 0;
  for (const std::string& path : f.models) {
    if (access(path.c_str(), R_OK) != 0) {
      std::printf("{\"model\": \"%s\", \"skipped\": \"file not found\"}\n",
                  path.c_str());
      continue;
    }
    absl::StatusOr<std::unique_ptr<ModelWeights>> loaded = LoadModel(path);
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(),
                   std::string(loaded.status().message()).c_str());
      ++failures;
      continue;
    }
    std::shared_ptr<const ModelWeights> model(std::move(*loaded));
    RunResult b1, b16;
    for (int batch : f.batches) {
      absl::StatusOr<RunResult> r = RunBatch(model, threads, f, batch, path);
      if (!r.ok()) {
        std::fprintf(stderr, "batch %d: %s\n", batch,
                     std::string(r.status().message()).c_str());
        ++failures;
        continue;
      }
      if (batch == 1) b1 = *r;
      if (batch == 16) b16 = *r;
    }
    if (b1.decode_tok_s > 0 && b16.decode_tok_s > 0) {
      std::printf(
          "{\"model\": \"%s\", \"summary\": true, \"batch1_tok_s\": %.1f, "
          "\"batch16_tok_s\": %.1f, \"ratio_b16_b1\": %.2f, "
          "\"ratio_b16_b1_median\": %.2f, \"ratio_b16_b1_best\": %.2f, "
          "\"floor\": 3.5}\n",
          path.c_str(), b1.decode_tok_s, b16.decode_tok_s,
          b16.decode_tok_s / b1.decode_tok_s,
          b16.median_decode_tok_s / b1.median_decode_tok_s,
          b16.best_decode_tok_s / b1.best_decode_tok_s);
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) { return pdserve::Main(argc, argv); }
