// Images in: vision-encoder time per image and its share of time to first
// token, on the CPU, for a random model with Qwen3.5-4B's shapes (bf16
// weights): the vision tower (24 blocks of width 1024, MLP 4096, 16 heads,
// patch 16, 2x2 merge into 2560) and the hybrid language model (hidden
// 2560, MLP 9216, Gated DeltaNet 16/32 heads of 128 with full attention
// every 4th layer, 16/4 heads of 256), of which --lm-layers layers are built
// (default 4, one linear x3 + full group; the vocabulary is cut to 4096:
// its embedding lookup and one logits row cost little).
//
// For each image size (448x448, 1024x1024: 196 and 1024 image tokens) and
// thread count (1, 2): an EngineCore with a fresh encoder cache admits one
// request (the PNG file, the image between 16 text tokens) and runs its
// whole prompt in one step. Reported per run (median of --repeat):
//   admit_ms     AddSequence: hash, PNG decode, grid check, positions
//   encode_ms    the vision encoder in the step (StepResult.encode_ns,
//                preprocessing included)
//   prefill_ms   the rest of the step (the LM prefill of the --lm-layers
//                built, sampling)
//   ttft_ms      admit + step; encode_share = encode_ms / ttft_ms
//   lm32_ms, encode_share_lm32: the same with the prefill scaled to the
//                model's 32 layers (prefill_ms * 32 / --lm-layers), an
//                estimate of the full model's share
//   cpu_ms       process CPU time over admit + step: on a shared machine
//                that pauses or starves the benchmark, cpu_ms / ttft_ms
//                falls below the thread count (1 thread: well below 1
//                means the wall times include time it did not run)
// One JSON line per (image, threads).
//
// Usage: vision_bench [--repeat R] [--lm-layers N] [--sizes 448,1024]
//                     [--threads 1,2]
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_flags.h"
#include "bench/random_weights.h"
#include "engine/core/engine_core.h"
#include "kernels/dtype.h"
#include "kernels/thread_pool.h"
#include "png.h"

namespace pdserve {
namespace {

constexpr int32_t kImageToken = 4000;

using Builder = bench::RandomWeights;

void BuildVision(Builder& b) {
  VisionConfig& v = b.w.config.vision;
  v.depth = 24;
  v.hidden_size = 1024;
  v.num_heads = 16;
  v.intermediate_size = 4096;
  v.out_hidden_size = b.w.config.hidden_size;
  v.num_position_embeddings = 2304;
  v.image_token_id = kImageToken;
  const int64_t h = v.hidden_size, m2 = 4 * h;
  VisionWeights& vw = b.w.vision;
  vw.patch_embed = b.Matrix(h, v.patch_dim(), DType::kF32);
  vw.patch_bias = b.Vector(h, 0, 0.02f);
  vw.pos_embed = b.Vector(v.num_position_embeddings * h, 0, 0.02f);
  vw.blocks.resize(v.depth);
  for (VisionBlockWeights& k : vw.blocks) {
    k.ln1_w = b.Vector(h, 1, 0.1f);
    k.ln1_b = b.Vector(h, 0, 0.02f);
    k.qkv = b.Matrix(3 * h, h, DType::kBF16);
    k.qkv_b = b.Vector(3 * h, 0, 0.02f);
    k.proj = b.Matrix(h, h, DType::kBF16);
    k.proj_b = b.Vector(h, 0, 0.02f);
    k.ln2_w = b.Vector(h, 1, 0.1f);
    k.ln2_b = b.Vector(h, 0, 0.02f);
    k.fc1 = b.Matrix(v.intermediate_size, h, DType::kBF16);
    k.fc1_b = b.Vector(v.intermediate_size, 0, 0.02f);
    k.fc2 = b.Matrix(h, v.intermediate_size, DType::kBF16);
    k.fc2_b = b.Vector(h, 0, 0.02f);
  }
  vw.merger_norm_w = b.Vector(h, 1, 0.1f);
  vw.merger_norm_b = b.Vector(h, 0, 0.02f);
  vw.merger_fc1 = b.Matrix(m2, m2, DType::kBF16);
  vw.merger_fc1_b = b.Vector(m2, 0, 0.02f);
  vw.merger_fc2 = b.Matrix(v.out_hidden_size, m2, DType::kBF16);
  vw.merger_fc2_b = b.Vector(v.out_hidden_size, 0, 0.02f);
}

std::shared_ptr<ModelWeights> BuildModel(int64_t layers) {
  auto w = std::make_shared<ModelWeights>();
  ModelConfig& c = w->config;
  c.arch = Architecture::kQwen35;
  c.name = "random-qwen3.5-4b-shapes";
  c.vocab_size = 4096;
  c.hidden_size = 2560;
  c.intermediate_size = 9216;
  c.num_layers = layers;
  c.num_heads = 16;
  c.num_kv_heads = 4;
  c.head_dim = 256;
  c.rope_dims = 64;
  c.rope_theta = 1e7f;
  c.rms_norm_eps = 1e-6f;
  c.max_context = 4096;
  c.qk_norm = true;
  c.attn_output_gate = true;
  c.mrope_sections = {11, 11, 10};
  c.linear_num_k_heads = 16;
  c.linear_num_v_heads = 32;
  c.linear_k_head_dim = 128;
  c.linear_v_head_dim = 128;
  c.linear_conv_kernel = 4;
  for (int64_t l = 0; l < layers; ++l) c.linear_layers.push_back((l + 1) % 4 != 0);
  Builder b{*w};
  const int64_t hid = c.hidden_size;
  w->token_embedding = b.Matrix(c.vocab_size, hid, DType::kBF16);
  w->lm_head = b.Matrix(c.vocab_size, hid, DType::kBF16);
  w->output_norm = b.Vector(hid, 1, 0.1f);
  w->layers.resize(layers);
  for (int64_t l = 0; l < layers; ++l) {
    LayerWeights& lw = w->layers[l];
    lw.attn_norm = b.Vector(hid, 1, 0.1f);
    lw.ffn_norm = b.Vector(hid, 1, 0.1f);
    lw.w_gate = b.Matrix(c.intermediate_size, hid, DType::kBF16);
    lw.w_up = b.Matrix(c.intermediate_size, hid, DType::kBF16);
    lw.w_down = b.Matrix(hid, c.intermediate_size, DType::kBF16);
    if (c.IsLinearLayer(l)) {
      lw.lin_qkv = b.Matrix(c.linear_conv_dim(), hid, DType::kBF16);
      lw.lin_z = b.Matrix(c.linear_value_dim(), hid, DType::kBF16);
      lw.lin_b = b.Matrix(c.linear_num_v_heads, hid, DType::kBF16);
      lw.lin_a = b.Matrix(c.linear_num_v_heads, hid, DType::kBF16);
      lw.lin_out = b.Matrix(hid, c.linear_value_dim(), DType::kBF16);
      lw.lin_conv = b.Vector(c.linear_conv_dim() * c.linear_conv_kernel, 0, 0.3f);
      lw.lin_dt_bias = b.Vector(c.linear_num_v_heads, 0, 0.5f);
      lw.lin_a_log = b.Vector(c.linear_num_v_heads, 0, 0.5f);
      lw.lin_norm = b.Vector(c.linear_v_head_dim, 1, 0.1f);
    } else {
      lw.wq = b.Matrix(2 * c.q_dim(), hid, DType::kBF16);
      lw.wk = b.Matrix(c.kv_dim(), hid, DType::kBF16);
      lw.wv = b.Matrix(c.kv_dim(), hid, DType::kBF16);
      lw.wo = b.Matrix(hid, c.q_dim(), DType::kBF16);
      lw.q_norm = b.Vector(c.head_dim, 1, 0.1f);
      lw.k_norm = b.Vector(c.head_dim, 1, 0.1f);
    }
  }
  BuildVision(b);
  return w;
}

void PngWrite(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<std::string*>(png_get_io_ptr(png));
  out->append(reinterpret_cast<const char*>(data), n);
}
void PngFlush(png_structp) {}

// A size x size RGB PNG of smooth colours and noise.
std::string MakePng(int size) {
  std::mt19937 rng(size);
  std::vector<uint8_t> px(static_cast<size_t>(size) * size * 3);
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      uint8_t* p = &px[(static_cast<size_t>(y) * size + x) * 3];
      p[0] = static_cast<uint8_t>(127 + 120 * std::sin(x / 9.0 + y / 13.0));
      p[1] = static_cast<uint8_t>(255 * x / size);
      p[2] = static_cast<uint8_t>(rng() % 64 + 96);
    }
  }
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr,
                                            nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, PngWrite, PngFlush);
  png_set_IHDR(png, info, size, size, 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < size; ++y) {
    png_write_row(png, &px[static_cast<size_t>(y) * size * 3]);
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

struct Run {
  double admit_ms = 0, encode_ms = 0, prefill_ms = 0, cpu_ms = 0;
};

double ProcessCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

Run Once(std::shared_ptr<const ModelWeights> w, int threads,
         const std::string& png, const ImageGrid& grid, uint64_t id) {
  ThreadPool pool(threads);
  EngineOptions o;
  o.kv_memory.bytes = int64_t{256} << 20;
  o.max_sequences = 2;
  o.max_step_tokens = 2048;
  o.max_seq_len = 2048;
  auto engine = EngineCore::Create(w, &pool, o);
  if (!engine.ok()) {
    std::fprintf(stderr, "vision_bench: %s\n",
                 std::string(engine.status().message()).c_str());
    std::exit(1);
  }
  std::vector<int32_t> prompt;
  for (int i = 0; i < 8; ++i) prompt.push_back(10 + i);
  prompt.insert(prompt.end(), grid.num_tokens(2), kImageToken);
  for (int i = 0; i < 8; ++i) prompt.push_back(20 + i);
  using Clock = std::chrono::steady_clock;
  const double cpu0 = ProcessCpuMs();
  const auto t0 = Clock::now();
  const SequenceImage img{png, grid};
  absl::Status s = (*engine)->AddSequence(id, prompt, 2048, SamplingParams(),
                                          {}, 1, nullptr, 0, {img});
  const auto t1 = Clock::now();
  StepResult r;
  if (s.ok()) {
    s = (*engine)->Step(
        {{id, static_cast<int32_t>(prompt.size())}}, &r);
  }
  const auto t2 = Clock::now();
  const double cpu1 = ProcessCpuMs();
  if (!s.ok()) {
    std::fprintf(stderr, "vision_bench: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
  Run out;
  out.admit_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  out.encode_ms = r.encode_ns / 1e6;
  out.prefill_ms =
      std::chrono::duration<double, std::milli>(t2 - t1).count() - out.encode_ms;
  out.cpu_ms = cpu1 - cpu0;
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) {
  using namespace pdserve;
  int repeat = 3, lm_layers = 4;
  std::string sizes = "448,1024", thread_list = "1,2";
  bench::BenchFlags(
      "vision_bench [--repeat R] [--lm-layers N] [--sizes A,B] "
      "[--threads 1,2]")
      .Int("repeat", &repeat, 1, 100)
      .Int("lm-layers", &lm_layers, 1, 32)
      .String("sizes", &sizes)
      .String("threads", &thread_list)
      .Parse(argc, argv);
  std::vector<int> thread_counts;
  for (absl::string_view sv : absl::StrSplit(thread_list, ',')) {
    int t = 0;
    if (!absl::SimpleAtoi(sv, &t) || t < 1 || t > 256) {
      std::fprintf(stderr, "vision_bench: bad thread count '%s'\n",
                   std::string(sv).c_str());
      return 2;
    }
    thread_counts.push_back(t);
  }
  std::shared_ptr<const ModelWeights> w = BuildModel(lm_layers);
  uint64_t id = 1;
  for (absl::string_view sv : absl::StrSplit(sizes, ',')) {
    int size = 0;
    if (!absl::SimpleAtoi(sv, &size) || size < 32) {
      std::fprintf(stderr, "vision_bench: bad size '%s'\n",
                   std::string(sv).c_str());
      return 2;
    }
    const std::string png = MakePng(size);
    auto grid = GridForImage(size, size, w->config.vision.preprocess);
    if (!grid.ok()) return 1;
    for (int threads : thread_counts) {
      std::vector<double> admit, encode, prefill, cpu;
      for (int k = 0; k < repeat; ++k) {
        const Run r = Once(w, threads, png, *grid, id++);
        admit.push_back(r.admit_ms);
        encode.push_back(r.encode_ms);
        prefill.push_back(r.prefill_ms);
        cpu.push_back(r.cpu_ms);
      }
      const double a = Median(admit), e = Median(encode), p = Median(prefill);
      const double c = Median(cpu);
      const double p32 = p * 32.0 / lm_layers;
      std::printf(
          "{\"image\": \"%dx%d\", \"image_tokens\": %ld, \"patches\": %ld, "
          "\"threads\": %d, \"repeat\": %d, \"admit_ms\": %.1f, "
          "\"encode_ms\": %.1f, \"prefill_ms\": %.1f, \"lm_layers\": %d, "
          "\"ttft_ms\": %.1f, \"encode_share\": %.3f, \"lm32_ms\": %.1f, "
          "\"encode_share_lm32\": %.3f, \"cpu_ms\": %.1f}\n",
          size, size, static_cast<long>(grid->num_tokens(2)),
          static_cast<long>(grid->num_patches()), threads, repeat, a, e, p,
          lm_layers, a + e + p, e / (a + e + p), p32, e / (a + e + p32), c);
      std::fflush(stdout);
    }
  }
  return 0;
}
