// Qwen3 MoE CPU decode benchmark on a small random model (Q8_0 weights,
// 32 experts, top-4): decode tokens/s with 1 and with 8 sequences per step,
// and per step the expert weight matrices read (counted by ForwardPass)
// against the distinct experts the router selected. Prints one JSON line per
// batch size and a summary line with the batch-8 / batch-1 throughput ratio.
//
// Physical limit: the weight bytes a step reads (ForwardStats, each selected
// expert once) times steps/s is compared with a read-bandwidth probe over a
// buffer the size of the model's weights (the same level of the memory
// hierarchy the model is served from), on the same pool: "stream_fraction".
// With --repeat R the batch-1 / batch-8 pair runs R times (the machine is
// shared and noisy) and a last line gives the median and range of the ratio.
//
// Usage: moe_bench [--steps N] [--threads T] [--repeat R]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/random_weights.h"
#include "bench/read_probe.h"
#include "engine/kv/kv_storage.h"
#include "engine/model/forward.h"
#include "kernels/dtype.h"
#include "kernels/thread_pool.h"

namespace pdserve {
namespace {

using Builder = bench::RandomWeights;

std::unique_ptr<ModelWeights> MakeModel(int64_t* model_bytes) {
  auto w = std::make_unique<ModelWeights>();
  ModelConfig& c = w->config;
  c.arch = Architecture::kQwen3Moe;
  c.name = "random-qwen3-moe";
  c.vocab_size = 8192;
  c.hidden_size = 512;
  c.intermediate_size = 1024;
  c.num_layers = 4;
  c.num_heads = 8;
  c.num_kv_heads = 4;
  c.head_dim = 64;
  c.rope_dims = 64;
  c.rope_theta = 1e6f;
  c.rms_norm_eps = 1e-6f;
  c.max_context = 4096;
  c.qk_norm = true;
  c.num_experts = 32;
  c.num_experts_used = 4;
  c.moe_intermediate_size = 256;
  const DType t = DType::kQ8_0;
  Builder b{*w};
  w->token_embedding = b.Matrix(c.vocab_size, c.hidden_size, t);
  w->lm_head = b.Matrix(c.vocab_size, c.hidden_size, t);
  w->output_norm = b.Ones(c.hidden_size);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    LayerWeights lw;
    lw.attn_norm = b.Ones(c.hidden_size);
    lw.ffn_norm = b.Ones(c.hidden_size);
    lw.q_norm = b.Ones(c.head_dim);
    lw.k_norm = b.Ones(c.head_dim);
    lw.wq = b.Matrix(c.q_dim(), c.hidden_size, t);
    lw.wk = b.Matrix(c.kv_dim(), c.hidden_size, t);
    lw.wv = b.Matrix(c.kv_dim(), c.hidden_size, t);
    lw.wo = b.Matrix(c.hidden_size, c.q_dim(), t);
    lw.router = b.Matrix(c.num_experts, c.hidden_size, DType::kF32);
    for (int64_t x = 0; x < c.num_experts; ++x) {
      lw.experts.push_back(
          {b.Matrix(c.moe_intermediate_size, c.hidden_size, t),
           b.Matrix(c.moe_intermediate_size, c.hidden_size, t),
           b.Matrix(c.hidden_size, c.moe_intermediate_size, t)});
    }
    w->layers.push_back(std::move(lw));
  }
  *model_bytes = b.bytes;
  return w;
}

struct Result {
  double tok_per_s = 0;
  double weight_bytes_per_step = 0;
  double experts_selected_per_step = 0;
  double expert_matrices_per_step = 0;
  bool matrices_le_3x_experts = false;  // exact, from the integer counters
};

Result RunBatch(const ModelWeights& w, ThreadPool& pool, int batch, int steps,
                double stream_gb_per_s) {
  const ModelConfig& c = w.config;
  // Room for the 16-token prompt, the warm-up and `steps` decode tokens.
  const int64_t page = 16, pages_per_seq = (16 + 2 + steps + page - 1) / page;
  KvStorage kv(c.num_layers, c.kv_dim(), page, pages_per_seq * batch);
  auto fp = ForwardPass::Create(w, kv, pool, 64 * batch);
  if (!fp.ok()) {
    std::fprintf(stderr, "%s\n", std::string(fp.status().message()).c_str());
    std::exit(1);
  }
  std::vector<std::vector<int32_t>> pages(batch), prompts(batch);
  std::vector<int64_t> pos(batch, 0);
  std::vector<int32_t> next(batch);
  for (int s = 0; s < batch; ++s) {
    pages[s].resize(pages_per_seq);
    std::iota(pages[s].begin(), pages[s].end(), s * pages_per_seq);
    for (int i = 0; i < 16; ++i)
      prompts[s].push_back(1 + (s * 131 + i * 17) % 8000);
  }
  std::vector<float> logits(batch * c.vocab_size);
  auto step = [&](bool prefill, ForwardStats* st) {
    std::vector<SequenceSpan> spans(batch);
    for (int s = 0; s < batch; ++s) {
      spans[s].tokens = prefill ? absl::MakeConstSpan(prompts[s])
                                : absl::MakeConstSpan(&next[s], 1);
      spans[s].start_pos = pos[s];
      spans[s].page_table = pages[s];
    }
    const absl::Status run = (*fp)->Run(spans, absl::MakeSpan(logits), st);
    if (!run.ok()) {
      std::fprintf(stderr, "%s\n", std::string(run.message()).c_str());
      std::exit(1);
    }
    for (int s = 0; s < batch; ++s) {
      pos[s] += spans[s].size();
      const float* row = logits.data() + s * c.vocab_size;
      next[s] =
          static_cast<int32_t>(std::max_element(row, row + c.vocab_size) - row);
    }
  };
  step(true, nullptr);
  step(false, nullptr);  // warm-up
  ForwardStats st;
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < steps; ++k) step(false, &st);
  const double sec =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  Result r;
  r.tok_per_s = batch * steps / sec;
  r.experts_selected_per_step = double(st.experts_selected) / steps;
  r.expert_matrices_per_step = double(st.expert_matrices_read) / steps;
  r.matrices_le_3x_experts = st.expert_matrices_read <= 3 * st.experts_selected;
  r.weight_bytes_per_step = double(st.weight_bytes_read) / steps;
  // Weight bytes read per second, against the probe's read bandwidth.
  const double gb_per_s = r.weight_bytes_per_step * steps / sec * 1e-9;
  std::printf(
      "{\"bench\":\"moe_decode\",\"batch\":%d,\"steps\":%d,\"threads\":%d,"
      "\"tok_per_s\":%.1f,\"experts_selected_per_step\":%.2f,"
      "\"expert_matrices_read_per_step\":%.2f,"
      "\"matrices_per_selected_expert\":%.3f,"
      "\"per_token_reads_would_be\":%lld,\"weight_mb_per_step\":%.2f,"
      "\"weight_gb_per_s\":%.2f,\"stream_fraction\":%.3f}\n",
      batch, steps, pool.num_threads(), r.tok_per_s,
      r.experts_selected_per_step, r.expert_matrices_per_step,
      r.expert_matrices_per_step / r.experts_selected_per_step,
      static_cast<long long>(3 * batch * c.num_experts_used * c.num_layers),
      r.weight_bytes_per_step * 1e-6, gb_per_s, gb_per_s / stream_gb_per_s);
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) {
  int steps = 32, threads = 2, repeat = 1;
  pdserve::bench::BenchFlags("moe_bench [--steps N] [--threads N] [--repeat N]")
      .Int("steps", &steps, 1)
      .Int("threads", &threads, 1, 1024)
      .Int("repeat", &repeat, 1)
      .Parse(argc, argv);
  int64_t model_bytes = 0;
  auto w = pdserve::MakeModel(&model_bytes);
  pdserve::ThreadPool pool(threads);
  const double stream = pdserve::bench::StreamReadGbPerS(model_bytes, pool);
  std::printf(
      "{\"bench\":\"stream_read\",\"threads\":%d,\"mb\":%.1f,"
      "\"gb_per_s\":%.2f}\n",
      threads, model_bytes * 1e-6, stream);
  std::vector<double> ratios, tok1, tok8;
  for (int r = 0; r < repeat; ++r) {
    const auto one = pdserve::RunBatch(*w, pool, 1, steps, stream);
    const auto eight = pdserve::RunBatch(*w, pool, 8, steps, stream);
    ratios.push_back(eight.tok_per_s / one.tok_per_s);
    tok1.push_back(one.tok_per_s);
    tok8.push_back(eight.tok_per_s);
    std::printf(
        "{\"bench\":\"moe_decode_summary\",\"batch8_over_batch1_tok_per_s\":"
        "%.2f,\"batch8_matrices_read_le_3x_distinct_experts\":%s}\n",
        ratios.back(), eight.matrices_le_3x_experts ? "true" : "false");
  }
  if (repeat > 1) {
    std::printf(
        "{\"bench\":\"moe_decode_repeats\",\"threads\":%d,\"repeat\":%d,"
        "\"ratio_median\":%.2f,\"ratio_min\":%.2f,\"ratio_max\":%.2f,"
        "\"batch1_tok_per_s_median\":%.1f,\"batch8_tok_per_s_median\":%.1f}\n",
        threads, repeat, pdserve::Median(ratios),
        *std::min_element(ratios.begin(), ratios.end()),
        *std::max_element(ratios.begin(), ratios.end()), pdserve::Median(tok1),
        pdserve::Median(tok8));
  }
  return 0;
}
