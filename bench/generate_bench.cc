// Generation throughput harness: prefill (a P-token prompt in one pass) and
// batch-1 decode (D tokens, one forward pass each) tokens/s for each model
// file and thread count, printed as one JSON document on stdout.
//
//   generate_bench --model A.gguf [--model B.gguf ...] [--threads 1,2]
//                  [--prompt-tokens 512] [--decode-tokens 128] [--repeat 2]
//
// Each figure is the best of --repeat runs (after one warm-up pass that
// pages the weights in). Prompt ids are synthetic (speed does not depend on
// which ids they are). bench/llamacpp_compare.py runs this next to llama.cpp.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/loader/model_loader.h"
#include "engine/model/sequence_runner.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

struct Args {
  std::vector<std::string> models;
  std::vector<int> threads = {1, 2};
  int64_t prompt_tokens = 512;
  int64_t decode_tokens = 128;
  int repeat = 2;
};

bool Parse(int argc, char** argv, Args* a) {
  bool threads_set = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return false;
    const std::string v = argv[++i];
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
      if (!absl::SimpleAtoi(v, &a->prompt_tokens) || a->prompt_tokens < 1)
        return false;
    } else if (arg == "--decode-tokens") {
      if (!absl::SimpleAtoi(v, &a->decode_tokens) || a->decode_tokens < 1)
        return false;
    } else if (arg == "--repeat") {
      if (!absl::SimpleAtoi(v, &a->repeat) || a->repeat < 1) return false;
    } else {
      return false;
    }
  }
  return !a->models.empty() && !a->threads.empty();
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

int Main(int argc, char** argv) {
  Args args;
  if (!Parse(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: generate_bench --model PATH [--model PATH ...] "
                 "[--threads 1,2] [--prompt-tokens 512] [--decode-tokens 128] "
                 "[--repeat 2]\n");
    return 2;
  }
  nlohmann::json out;
  out["isa"] = MatMulIsa();
  out["prompt_tokens"] = args.prompt_tokens;
  out["decode_tokens"] = args.decode_tokens;
  out["results"] = nlohmann::json::array();
  for (const std::string& path : args.models) {
    auto weights = LoadModel(path);
    if (!weights.ok()) {
      std::fprintf(stderr, "generate_bench: %s\n",
                   std::string(weights.status().message()).c_str());
      return 1;
    }
    const ModelConfig& c = (*weights)->config;
    std::vector<int32_t> prompt(args.prompt_tokens);
    for (int64_t i = 0; i < args.prompt_tokens; ++i) {
      prompt[i] = static_cast<int32_t>((i * 7919 + 17) % c.vocab_size);
    }
    for (int threads : args.threads) {
      ThreadPool pool(threads);
      auto runner = SequenceRunner::Create(
          **weights, pool, args.prompt_tokens + args.decode_tokens + 1,
          args.prompt_tokens);
      if (!runner.ok()) {
        std::fprintf(stderr, "generate_bench: %s\n",
                     std::string(runner.status().message()).c_str());
        return 1;
      }
      SequenceRunner& r = **runner;
      (void)r.Feed(absl::MakeConstSpan(prompt).subspan(0, 16));  // warm-up
      double best_prefill = 1e30, best_decode = 1e30;
      for (int rep = 0; rep < args.repeat; ++rep) {
        r.Reset();
        auto t0 = std::chrono::steady_clock::now();
        auto logits = r.Feed(prompt);
        if (!logits.ok()) return 1;
        best_prefill = std::min(best_prefill, Since(t0));
        int32_t token = 0;
        t0 = std::chrono::steady_clock::now();
        for (int64_t d = 0; d < args.decode_tokens; ++d) {
          const float* l = logits->data();
          token = static_cast<int32_t>(std::max_element(l, l + c.vocab_size) -
                                       l);
          logits = r.Feed({&token, 1});
          if (!logits.ok()) return 1;
        }
        best_decode = std::min(best_decode, Since(t0));
      }
      nlohmann::json row;
      row["model"] = path;
      row["weights_type"] = DTypeName((*weights)->layers[0].wq.type);
      row["threads"] = threads;
      row["prefill_tok_s"] = args.prompt_tokens / best_prefill;
      row["decode_tok_s"] = args.decode_tokens / best_decode;
      row["prefill_s"] = best_prefill;
      row["decode_s"] = best_decode;
      out["results"].push_back(row);
      std::fprintf(stderr, "%s threads=%d prefill %.1f tok/s decode %.1f tok/s\n",
                   path.c_str(), threads, args.prompt_tokens / best_prefill,
                   args.decode_tokens / best_decode);
    }
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) { return pdserve::Main(argc, argv); }
