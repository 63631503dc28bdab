// CUDA runner benchmark on a random-weight Qwen3-4B-shaped bf16 model
// (hidden 2560, 32 q heads / 8 kv heads of 128, intermediate 9728, vocab
// 151936, tied embeddings, qk-norm; 36 layers unless --layers), against the
// device's own limits measured in the same run:
//   peaks: HBM read bandwidth (cuda_runner::MeasureDeviceReadBandwidth, a
//     sweep over 8x L2, CUDA events) and bf16 GEMM throughput (cuBLAS,
//     8192^3, bf16 in, f32 out, best of 5, CUDA events);
//   decode: one step of B sequences at position --context (device greedy
//     sampling, CUDA graphs), median step time; bytes per step = weights +
//     KV read (ForwardStats); achieved bandwidth as a fraction of the
//     measured peak (hbm_fraction) and of the datasheet's (--hbm_tbps, the
//     H200's 4.8 TB/s: hbm_fraction_spec);
//   prefill: one --prefill-token prompt in one step; TFLOP/s (ForwardStats
//     FLOPs / time) as a fraction of the measured GEMM peak and of the
//     datasheet's dense bf16 (--peak_tflops, 989);
//   itl: batch 1 decoding --itl_steps tokens back to back (each step fed
//     the token it sampled): host time per token, p50 / p99, and the device
//     idle fraction between steps (CUDA events around each step's device
//     work, RunnerOptions::step_timing).
// Usage: gpu_decode_bench [--layers 36] [--batches 1,8,64] [--context 512]
//   [--steps 20] [--prefill 4096] [--prefill_reps 3] [--itl_steps 512]
//   [--json FILE]
// Prints one JSON object (also written to --json).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/plugin/cuda_runner.h"
#include "kernels/cuda/plugin/read_probe.h"
#include "kernels/cuda/plugin/runner_internal.h"

namespace pdserve {
namespace {

struct Flags {
  int64_t layers = 36;
  std::vector<int64_t> batches = {1, 8, 64};
  int64_t context = 512;
  int64_t steps = 20;
  int64_t prefill = 4096;
  int64_t prefill_reps = 3;
  int64_t itl_steps = 512;
  double hbm_tbps = 4.8;
  double peak_tflops = 989.0;
  std::string json;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--layers")
      f.layers = std::atoll(v.c_str());
    else if (k == "--context")
      f.context = std::atoll(v.c_str());
    else if (k == "--steps")
      f.steps = std::atoll(v.c_str());
    else if (k == "--prefill")
      f.prefill = std::atoll(v.c_str());
    else if (k == "--prefill_reps")
      f.prefill_reps = std::atoll(v.c_str());
    else if (k == "--itl_steps")
      f.itl_steps = std::atoll(v.c_str());
    else if (k == "--hbm_tbps")
      f.hbm_tbps = std::atof(v.c_str());
    else if (k == "--peak_tflops")
      f.peak_tflops = std::atof(v.c_str());
    else if (k == "--json")
      f.json = v;
    else if (k == "--batches") {
      f.batches.clear();
      for (absl::string_view b : absl::StrSplit(v, ',')) {
        f.batches.push_back(std::atoll(std::string(b).c_str()));
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  return f;
}

// Random bf16 matrices; matrices of one shape share host memory (the device
// copies are distinct), so the host needs ~1 GB for any layer count.
class RandomModel {
 public:
  explicit RandomModel(int64_t layers) {
    ModelConfig& c = w_.config;
    c.arch = Architecture::kQwen3;
    c.name = "random-qwen3-4b-shape";
    c.vocab_size = 151936;
    c.hidden_size = 2560;
    c.intermediate_size = 9728;
    c.num_layers = layers;
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.rope_dims = 128;
    c.rope_theta = 1000000.0f;
    c.rms_norm_eps = 1e-6f;
    c.max_context = 40960;
    c.tied_embeddings = true;
    c.qk_norm = true;
    const int64_t h = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(),
                  in = c.intermediate_size;
    const WeightView wq = Matrix(qd, h), wkv = Matrix(kvd, h),
                     wo = Matrix(h, qd), wup = Matrix(in, h),
                     wdown = Matrix(h, in);
    w_.token_embedding = Matrix(c.vocab_size, h);
    w_.lm_head = w_.token_embedding;
    const float* ones_h = Ones(h);
    const float* ones_d = Ones(c.head_dim);
    w_.output_norm = ones_h;
    w_.layers.resize(layers);
    for (LayerWeights& l : w_.layers) {
      l.attn_norm = l.ffn_norm = ones_h;
      l.q_norm = l.k_norm = ones_d;
      l.wq = wq;
      l.wk = l.wv = wkv;
      l.wo = wo;
      l.w_gate = l.w_up = wup;
      l.w_down = wdown;
    }
  }
  const ModelWeights& weights() const { return w_; }

 private:
  WeightView Matrix(int64_t rows, int64_t cols) {
    auto buf = std::make_shared<std::vector<uint16_t>>(rows * cols);
    uint64_t x = 0x9e3779b97f4a7c15ull ^ (rows * 131 + cols);
    for (uint16_t& v : *buf) {  // uniform in about [-0.03, 0.03]
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      const float f =
          (static_cast<float>(x >> 40) / 16777216.0f - 0.5f) * 0.06f;
      uint32_t b;
      std::memcpy(&b, &f, 4);
      v = static_cast<uint16_t>(b >> 16);
    }
    w_.storage.push_back(buf);
    return WeightView{DType::kBF16, rows, cols, cols * 2, buf->data()};
  }
  const float* Ones(int64_t n) {
    auto buf = std::make_shared<std::vector<float>>(n, 1.0f);
    w_.storage.push_back(buf);
    return buf->data();
  }
  ModelWeights w_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// The q-quantile (0..1) of v, nearest rank.
double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(q * v.size()));
  return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
}

// Best bf16 GEMM throughput (TFLOP/s) of cuBLAS on n x n x n, bf16 inputs,
// f32 output, timed with CUDA events (one warm-up, best of 5); 0 on error.
double MeasureGemmTflops(int64_t n) {
  void *w = nullptr, *x = nullptr, *y = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  double best_ms = 0.0;
  cuda::CublasGemm gemm;
  const bool ok = cudaMalloc(&w, n * n * 2) == cudaSuccess &&
                  cudaMalloc(&x, n * n * 2) == cudaSuccess &&
                  cudaMalloc(&y, n * n * 4) == cudaSuccess &&
                  cudaMemset(w, 0, n * n * 2) == cudaSuccess &&
                  cudaMemset(x, 0, n * n * 2) == cudaSuccess &&
                  cudaEventCreate(&a) == cudaSuccess &&
                  cudaEventCreate(&b) == cudaSuccess &&
                  gemm.Init() == cudaSuccess;
  const cuda::DeviceMatrix m{cuda::WType::kBF16, n, n, n * 2, w};
  for (int r = 0; ok && r < 6; ++r) {
    float ms = 0.0f;
    if (cudaEventRecord(a, nullptr) != cudaSuccess ||
        gemm.RunHalf(m, x, n, n, static_cast<float*>(y), n, nullptr) !=
            cudaSuccess ||
        cudaEventRecord(b, nullptr) != cudaSuccess ||
        cudaEventSynchronize(b) != cudaSuccess ||
        cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
      best_ms = 0.0;
      break;
    }
    if (r > 0 && (best_ms == 0.0 || ms < best_ms)) best_ms = ms;
  }
  for (void* p : {w, x, y}) {
    if (p != nullptr) cudaFree(p);
  }
  if (a != nullptr) cudaEventDestroy(a);
  if (b != nullptr) cudaEventDestroy(b);
  cudaGetLastError();
  return best_ms > 0.0 ? 2.0 * n * n * n / (best_ms * 1e-3) / 1e12 : 0.0;
}

// Batch 1 decoding `steps` tokens back to back at position `context` on
// `table`: host ms per token (p50, p99) and the device's idle fraction
// between steps (the runner's step timings). JSON object, or "null".
std::string BenchItl(cuda_runner::CudaRunner& r, const ModelConfig& c,
                     const std::vector<int32_t>& table, int64_t context,
                     int64_t steps) {
  if (steps < 2) return "null";
  int32_t token = 17;
  SequenceSpan s;
  s.page_table = table;
  DeviceSamplingParams p;
  SampledToken out;
  std::vector<double> ms;
  for (int64_t i = -3; i < steps; ++i) {    // 3 warm-up steps: the graph
    if (i == 0) (void)r.TakeStepTimings();  // drop the warm-up's
    s.tokens = absl::MakeConstSpan(&token, 1);
    s.start_pos = context + (i < 0 ? 0 : i);
    const auto a = std::chrono::steady_clock::now();
    const absl::Status st =
        r.RunAndSample({&s, 1}, {&p, 1}, {&out, 1}, nullptr);
    if (!st.ok()) {
      std::fprintf(stderr, "itl: %s\n", std::string(st.message()).c_str());
      return "null";
    }
    if (i >= 0) {
      ms.push_back(std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - a)
                       .count());
    }
    token = out.token % static_cast<int32_t>(c.vocab_size);
  }
  auto timings = r.TakeStepTimings();
  double busy = 0.0, gaps = 0.0;
  if (timings.ok()) {
    for (size_t i = 1; i < timings->size(); ++i) {  // gaps after step 0
      busy += (*timings)[i].busy_ms;
      gaps += (*timings)[i].gap_ms;
    }
  }
  const double p50 = Quantile(ms, 0.5), p99 = Quantile(ms, 0.99);
  const double idle = busy + gaps > 0.0 ? gaps / (busy + gaps) : -1.0;
  std::fprintf(stderr,
               "itl batch 1, %lld tokens: p50 %.3f ms, p99 %.3f ms (%.2fx), "
               "device idle %.2f%%\n",
               static_cast<long long>(steps), p50, p99, p99 / p50, 100 * idle);
  return absl::StrCat("{\"batch\": 1, \"context\": ", context,
                      ", \"steps\": ", steps, ", \"p50_ms\": ", p50,
                      ", \"p99_ms\": ", p99,
                      ", \"p99_over_p50\": ", p50 > 0.0 ? p99 / p50 : 0.0,
                      ", \"gpu_busy_ms\": ", busy, ", \"gpu_idle_ms\": ", gaps,
                      ", \"gpu_idle_fraction\": ", idle, "}");
}

int Main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  if (cuda_runner::DeviceCount() == 0) {
    const char* skipped = "{\"skipped\": \"no CUDA device\"}";
    std::printf("%s\n", skipped);
    if (!f.json.empty()) {
      if (FILE* out = std::fopen(f.json.c_str(), "w")) {
        std::fprintf(out, "%s\n", skipped);
        std::fclose(out);
      }
    }
    return 0;
  }
  auto dev = cuda_runner::QueryDevice(0);
  if (!dev.ok()) {
    std::fprintf(stderr, "%s\n", std::string(dev.status().message()).c_str());
    return 1;
  }
  RandomModel model(f.layers);
  const ModelConfig& c = model.weights().config;
  constexpr int64_t kPage = 16;
  const int64_t max_batch =
      *std::max_element(f.batches.begin(), f.batches.end());
  const int64_t seq_pages = (f.context + 1 + kPage - 1) / kPage;
  const int64_t itl_pages = (f.context + f.itl_steps + 3 + kPage - 1) / kPage;
  const int64_t pages = std::max({max_batch * seq_pages,
                                  (f.prefill + kPage - 1) / kPage, itl_pages}) +
                        1;
  const int64_t max_tokens = std::max<int64_t>(f.prefill, max_batch);
  // The peaks first, on an idle device.
  cuda_runner::ReadProbeOptions probe;
  auto hbm = cuda_runner::MeasureDeviceReadBandwidth(probe);
  if (!hbm.ok()) {
    std::fprintf(stderr, "HBM probe: %s\n",
                 std::string(hbm.status().message()).c_str());
  }
  const double hbm_measured = hbm.ok() ? hbm->bytes_per_second / 1e12 : 0.0;
  const double gemm_measured = MeasureGemmTflops(8192);
  std::fprintf(stderr, "measured: HBM read %.2f TB/s, bf16 GEMM %.0f TFLOP/s\n",
               hbm_measured, gemm_measured);
  // Fractions of the measured peaks (of the datasheet's when one failed).
  const double hbm_peak = hbm_measured > 0.0 ? hbm_measured : f.hbm_tbps;
  const double flop_peak = gemm_measured > 0.0 ? gemm_measured : f.peak_tflops;
  cuda_runner::RunnerOptions opt;
  opt.max_graph_batch = std::max<int64_t>(max_batch, 1);
  opt.step_timing = true;
  const auto t0 = std::chrono::steady_clock::now();
  auto runner = cuda_runner::CreateCudaRunner(
      model.weights(), cuda_runner::MakeGeometry(c, kPage, pages, max_batch),
      max_tokens, opt);
  if (!runner.ok()) {
    std::fprintf(stderr, "%s\n",
                 std::string(runner.status().message()).c_str());
    return 1;
  }
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  ForwardBackend& b = **runner;
  std::vector<std::string> decode_json;
  bool ok = true;
  for (int64_t batch : f.batches) {
    // Decode at position `context`: the KV content does not change the work.
    std::vector<std::vector<int32_t>> tables(batch);
    std::vector<int32_t> tokens(batch);
    std::vector<SequenceSpan> spans(batch);
    for (int64_t i = 0; i < batch; ++i) {
      tables[i].resize(seq_pages);
      for (int64_t p = 0; p < seq_pages; ++p) {
        tables[i][p] = static_cast<int32_t>(i * seq_pages + p);
      }
      tokens[i] = static_cast<int32_t>((i * 7919) % c.vocab_size);
      spans[i].tokens = absl::MakeConstSpan(&tokens[i], 1);
      spans[i].start_pos = f.context;
      spans[i].page_table = tables[i];
    }
    std::vector<DeviceSamplingParams> params(batch);
    std::vector<SampledToken> out(batch);
    std::vector<double> ms;
    ForwardStats stats;
    for (int64_t s = 0; s < f.steps + 3; ++s) {
      ForwardStats one;
      const auto a = std::chrono::steady_clock::now();
      absl::Status st =
          b.RunAndSample(spans, params, absl::MakeSpan(out), &one);
      const double t = std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - a)
                           .count();
      if (!st.ok()) {
        std::fprintf(stderr, "decode batch %lld: %s\n",
                     static_cast<long long>(batch),
                     std::string(st.message()).c_str());
        ok = false;
        break;
      }
      if (s >= 3) ms.push_back(t);  // 3 warm-up steps (graph capture)
      stats = one;
    }
    if (ms.empty()) continue;
    const double step_ms = Median(ms);
    const double bytes =
        static_cast<double>(stats.weight_bytes_read + stats.kv_bytes_read);
    const double tbps = bytes / (step_ms * 1e-3) / 1e12;
    decode_json.push_back(absl::StrCat(
        "{\"batch\": ", batch, ", \"context\": ", f.context, ", \"step_ms\": ",
        step_ms, ", \"tokens_per_s\": ", batch / (step_ms * 1e-3),
        ", \"weight_bytes\": ", stats.weight_bytes_read,
        ", \"kv_bytes\": ", stats.kv_bytes_read, ", \"hbm_tbps\": ", tbps,
        ", \"hbm_fraction\": ", tbps / hbm_peak,
        ", \"hbm_fraction_spec\": ", tbps / f.hbm_tbps, "}"));
    std::fprintf(
        stderr, "decode batch %lld: %.3f ms/step, %.2f TB/s (%.1f%% of %.2f)\n",
        static_cast<long long>(batch), step_ms, tbps, 100 * tbps / hbm_peak,
        hbm_peak);
  }
  std::string prefill_json = "null";
  if (f.prefill > 0) {
    std::vector<int32_t> prompt(f.prefill);
    for (int64_t i = 0; i < f.prefill; ++i) {
      prompt[i] = static_cast<int32_t>((i * 104729) % c.vocab_size);
    }
    std::vector<int32_t> table((f.prefill + kPage - 1) / kPage);
    for (size_t p = 0; p < table.size(); ++p)
      table[p] = static_cast<int32_t>(p);
    SequenceSpan s;
    s.tokens = prompt;
    s.page_table = table;
    std::vector<float> logits(c.vocab_size);
    std::vector<double> ms;
    ForwardStats stats;
    for (int64_t r = 0; r < f.prefill_reps + 1; ++r) {
      ForwardStats one;
      const auto a = std::chrono::steady_clock::now();
      absl::Status st = b.Run({&s, 1}, absl::MakeSpan(logits), &one);
      const double t = std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - a)
                           .count();
      if (!st.ok()) {
        std::fprintf(stderr, "prefill: %s\n",
                     std::string(st.message()).c_str());
        ok = false;
        break;
      }
      if (r >= 1) ms.push_back(t);
      stats = one;
    }
    if (!ms.empty()) {
      const double t = Median(ms);
      const double tflops =
          static_cast<double>(stats.flops) / (t * 1e-3) / 1e12;
      prefill_json = absl::StrCat(
          "{\"tokens\": ", f.prefill, ", \"ms\": ", t,
          ", \"flops\": ", stats.flops, ", \"tflops\": ", tflops,
          ", \"peak_fraction\": ", tflops / flop_peak,
          ", \"peak_fraction_spec\": ", tflops / f.peak_tflops, "}");
      std::fprintf(
          stderr,
          "prefill %lld tokens: %.2f ms, %.1f TFLOP/s (%.1f%% of %.0f)\n",
          static_cast<long long>(f.prefill), t, tflops,
          100 * tflops / flop_peak, flop_peak);
    }
  }
  std::string itl_json = "null";
  if (auto* cr = dynamic_cast<cuda_runner::CudaRunner*>(&b); cr != nullptr) {
    std::vector<int32_t> table(itl_pages);
    for (int64_t p = 0; p < itl_pages; ++p) table[p] = static_cast<int32_t>(p);
    itl_json = BenchItl(*cr, c, table, f.context, f.itl_steps);
  }
  ok = ok && (f.itl_steps < 2 || itl_json != "null");
  const std::string json = absl::StrCat(
      "{\"device\": \"", dev->name, "\", \"model\": \"", c.name,
      " bf16 (hidden 2560, 32/8 heads x 128, intermediate 9728, vocab 151936, "
      "tied)\", ",
      "\"layers\": ", f.layers, ", \"load_s\": ", load_s,
      ", \"hbm_peak_tbps\": ", hbm_peak, ", \"bf16_peak_tflops\": ", flop_peak,
      ", \"hbm_measured_tbps\": ", hbm_measured,
      ", \"bf16_gemm_measured_tflops\": ", gemm_measured,
      ", \"hbm_spec_tbps\": ", f.hbm_tbps,
      ", \"bf16_spec_tflops\": ", f.peak_tflops, ", \"decode\": [",
      absl::StrJoin(decode_json, ", "), "], \"prefill\": ", prefill_json,
      ", \"itl\": ", itl_json, ", \"ok\": ", ok ? "true" : "false", "}");
  std::printf("%s\n", json.c_str());
  if (!f.json.empty()) {
    if (FILE* out = std::fopen(f.json.c_str(), "w")) {
      std::fprintf(out, "%s\n", json.c_str());
      std::fclose(out);
    }
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) { return pdserve::Main(argc, argv); }
