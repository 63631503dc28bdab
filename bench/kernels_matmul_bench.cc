// Kernel benchmarks. Run: build/bench/kernels_bench [--benchmark_filter=...]
//   BM_StreamRead / BM_Memcpy     memory bandwidth of this machine (GB/s)
//   BM_MatVec/<dtype>/<rows>x<cols>/threads:N   one token; GB/s of weight
//       bytes, over enough copies of the matrix (~96 MiB, the size of the
//       SmolLM2-135M Q4_1 model) that it is not served from L2
//   BM_Gemm/<dtype>/<rows>x<cols>/tokens:T/threads:N   GFLOP/s (2*r*c*T)
//   .../packed   the same with the weights packed at load (PackWeights) for
//       the active SIMD level, where it packs
//   BM_SmolLM2Matmuls/Q4_1/tokens:T/threads:N   every matrix product of one
//       SmolLM2-135M step (a decode batch of T <= 64 sequences, the LM head
//       on every token; or a prefill chunk T=512, the LM head on its last
//       token): the kernels' share of a forward pass, as tokens/s
// PDSERVE_ISA=scalar|avx2|avx512 lowers the SIMD level.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "benchmark/benchmark.h"
#include "kernels/dtype.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"

namespace pdserve {
namespace {

static int64_t kWorkingSet =
    std::getenv("KB_WS") ? std::atoll(std::getenv("KB_WS")) : 96ll << 20;

// `copies` identical-shape random matrices in one allocation (and their
// packed copies, when packed).
struct Matrices {
  std::vector<uint8_t> bytes;
  std::vector<WeightView> views;
  std::vector<uint8_t> packed;
};

Matrices MakeMatrices(DType type, int64_t rows, int64_t cols, int copies,
                      bool pack = false) {
  Matrices m;
  const int64_t row_bytes = RowBytes(type, cols).value();
  const int64_t mat_bytes = row_bytes * rows;
  m.bytes.resize(mat_bytes * copies);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.1f);
  std::vector<float> src(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : src) v = dist(rng);
    QuantizeRow(type, src.data(), m.bytes.data() + r * row_bytes, cols);
  }
  for (int c = 1; c < copies; ++c) {
    std::memcpy(m.bytes.data() + c * mat_bytes, m.bytes.data(), mat_bytes);
  }
  for (int c = 0; c < copies; ++c) {
    m.views.push_back(WeightView{type, rows, cols, row_bytes,
                                 m.bytes.data() + c * mat_bytes});
  }
  const int64_t packed_bytes = pack ? PackedWeightBytes(m.views[0]) : 0;
  if (packed_bytes > 0) {
    m.packed.resize(packed_bytes * copies + 64);
    const auto addr = reinterpret_cast<uintptr_t>(m.packed.data());
    uint8_t* base = m.packed.data() + (64 - addr % 64) % 64;
    for (int c = 0; c < copies; ++c) {
      m.views[c] = PackWeights(m.views[c], base + c * packed_bytes);
    }
  }
  return m;
}

std::vector<float> RandomVec(int64_t n) {
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void MatVec(benchmark::State& state, DType type, int64_t rows, int64_t cols,
            int threads, bool pack) {
  const int64_t mat_bytes = RowBytes(type, cols).value() * rows;
  const int copies =
      static_cast<int>(std::clamp<int64_t>(kWorkingSet / mat_bytes, 1, 4096));
  Matrices m = MakeMatrices(type, rows, cols, copies, pack);
  ThreadPool pool(threads);
  std::vector<float> x = RandomVec(cols), y(rows);
  int next = 0;
  for (auto _ : state) {
    MatMul(m.views[next], x.data(), cols, 1, y.data(), rows, pool);
    benchmark::DoNotOptimize(y.data());
    next = next + 1 == copies ? 0 : next + 1;
  }
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(mat_bytes) * state.iterations() / 1e9,
      benchmark::Counter::kIsRate);
  state.counters["us/call"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 1e-6,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetLabel(MatMulIsa());
}

void Gemm(benchmark::State& state, DType type, int64_t rows, int64_t cols,
          int64_t tokens, int threads, bool pack) {
  Matrices m = MakeMatrices(type, rows, cols, 1, pack);
  ThreadPool pool(threads);
  std::vector<float> x = RandomVec(cols * tokens), y(rows * tokens);
  for (auto _ : state) {
    MatMul(m.views[0], x.data(), cols, tokens, y.data(), rows, pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * rows * cols * tokens * state.iterations() / 1e9,
                         benchmark::Counter::kIsRate);
  state.SetLabel(MatMulIsa());
}

// Sums n floats with 4 SSE accumulators, prefetching 2 KiB ahead like the
// mat-vec kernels do (baseline x86-64; plain loop elsewhere).
float SumStream(const float* a, int64_t n) {
#if defined(__SSE2__)
  __m128 s0 = _mm_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(a + i) + 2048, _MM_HINT_T0);
    s0 = _mm_add_ps(s0, _mm_loadu_ps(a + i));
    s1 = _mm_add_ps(s1, _mm_loadu_ps(a + i + 4));
    s2 = _mm_add_ps(s2, _mm_loadu_ps(a + i + 8));
    s3 = _mm_add_ps(s3, _mm_loadu_ps(a + i + 12));
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_add_ps(_mm_add_ps(s0, s1), _mm_add_ps(s2, s3)));
  float s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
#else
  float s = 0.0f;
  int64_t i = 0;
#endif
  for (; i < n; ++i) s += a[i];
  return s;
}

// Reads a buffer (model-sized, and 1 GiB) once per iteration, split over the
// pool's threads: the read bandwidth a mat-vec can hope for.
void StreamRead(benchmark::State& state, int64_t bytes, int threads) {
  const int64_t n = bytes / 4;
  std::vector<float> a(n, 1.0f);
  ThreadPool pool(threads);
  std::vector<float> partial(threads);
  for (auto _ : state) {
    pool.ParallelFor(threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t lo = n * i / threads, hi = n * (i + 1) / threads;
        partial[i] = SumStream(a.data() + lo, hi - lo);
      }
    });
    benchmark::DoNotOptimize(partial.data());
  }
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(bytes) * state.iterations() / 1e9,
                         benchmark::Counter::kIsRate);
}

void Memcpy(benchmark::State& state, int64_t bytes) {
  std::vector<uint8_t> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
  }
  // Bytes copied (read + written = 2x this).
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(bytes) * state.iterations() / 1e9,
                         benchmark::Counter::kIsRate);
}

// All matrices of a SmolLM2-135M forward pass as in the shipped GGUF: 30
// layers of Q4_1 (q, k, v, o, gate, up, down) and the Q8_0 tied LM head.
// One iteration = one decode step (tokens = 1) or one prefill chunk.
void ModelMatmuls(benchmark::State& state, DType layer_type, int64_t tokens,
                  int threads, bool pack) {
  constexpr int kLayers = 30;
  constexpr int64_t kHidden = 576, kKv = 192, kInter = 1536, kVocab = 49152;
  const std::pair<int64_t, int64_t> shapes[] = {
      {kHidden, kHidden}, {kKv, kHidden},    {kKv, kHidden},
      {kHidden, kHidden}, {kInter, kHidden}, {kInter, kHidden},
      {kHidden, kInter}};
  std::vector<Matrices> mats;
  int64_t bytes = 0;
  for (int l = 0; l < kLayers; ++l) {
    for (const auto& [rows, cols] : shapes) {
      mats.push_back(MakeMatrices(layer_type, rows, cols, 1, pack));
      bytes += mats.back().views[0].row_bytes * rows;
    }
  }
  mats.push_back(MakeMatrices(DType::kQ8_0, kVocab, kHidden, 1, pack));
  bytes += mats.back().views[0].row_bytes * kVocab;
  ThreadPool pool(threads);
  std::vector<float> x = RandomVec(tokens * kInter), y(tokens * kVocab);
  for (auto _ : state) {
    for (size_t i = 0; i + 1 < mats.size(); ++i) {
      const WeightView& w = mats[i].views[0];
      MatMul(w, x.data(), w.cols, tokens, y.data(), w.rows, pool);
    }
    // Prefill: the LM head runs on the last token only; decode (every token
    // is its own sequence): on every token.
    const int64_t head_tokens = tokens > 64 ? 1 : tokens;
    MatMul(mats.back().views[0], x.data(), kHidden, head_tokens, y.data(),
           kVocab, pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(tokens) * state.iterations(),
                         benchmark::Counter::kIsRate);
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(bytes) * state.iterations() / 1e9,
                         benchmark::Counter::kIsRate);
  state.SetLabel(MatMulIsa());
}

// log(sum exp) over a SmolLM2 vocabulary of logits: the SIMD LogSumExp
// against the scalar std::exp loop a sampler would otherwise run.
void LogSumExpBench(benchmark::State& state, bool simd) {
  std::vector<float> x = RandomVec(49152);
  for (float& v : x) v *= 4.0f;
  for (auto _ : state) {
    float r;
    if (simd) {
      r = LogSumExp(x.data(), static_cast<int64_t>(x.size()));
    } else {
      float max = x[0];
      for (float v : x) max = std::max(max, v);
      float sum = 0.0f;
      for (float v : x) sum += std::exp(v - max);
      r = max + std::log(sum);
    }
    benchmark::DoNotOptimize(r);
  }
  state.SetLabel(simd ? MatMulIsa() : "std::exp");
}

struct Shape {
  int64_t rows, cols;
};
constexpr Shape kShapes[] = {
    {576, 576},   {1536, 576},  {576, 1536},
    {49152, 576}, {2048, 2048}, {8192, 2048}};
constexpr DType kTypes[] = {DType::kQ4_1, DType::kQ4_0, DType::kQ8_0,
                            DType::kF16,  DType::kBF16, DType::kF32};

// "" or "/packed" (only where the active level packs).
std::vector<bool> PackVariants() {
  const uint8_t probe[34] = {};
  const WeightView w{DType::kQ8_0, 1, 32, 34, probe};
  if (PackedWeightBytes(w) > 0) return {false, true};
  return {false};
}
std::string Suffix(bool pack) { return pack ? "/packed" : ""; }

void RegisterWith(bool pack);

// The fixed cost of one parallel region (a decode step runs a few per
// layer): ParallelFor over 2 * threads trivial chunks.
void PoolRegion(benchmark::State& state, int threads) {
  ThreadPool pool(threads);
  std::vector<int64_t> sink(64 * threads);
  for (auto _ : state) {
    pool.ParallelFor(2 * threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sink[i * 8] += i;
    });
  }
  benchmark::DoNotOptimize(sink.data());
}

// Bandwidth probes and the LogSumExp comparison (once).
void RegisterProbes() {
  for (int threads : {2, 4}) {
    benchmark::RegisterBenchmark(
        ("BM_PoolRegion/threads:" + std::to_string(threads)).c_str(),
        [=](benchmark::State& s) { PoolRegion(s, threads); })
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
  for (bool simd : {true, false}) {
    benchmark::RegisterBenchmark(
        simd ? "BM_LogSumExp/49152" : "BM_LogSumExpScalarExp/49152",
        [=](benchmark::State& s) { LogSumExpBench(s, simd); })
        ->Unit(benchmark::kMicrosecond);
  }
  for (int threads : {1, 2}) {
    for (int64_t mib : {96, 1024}) {
      benchmark::RegisterBenchmark(
          ("BM_StreamRead/" + std::to_string(mib) +
           "MiB/threads:" + std::to_string(threads))
              .c_str(),
          [=](benchmark::State& s) { StreamRead(s, mib << 20, threads); })
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.3)
          ->UseRealTime();
    }
  }
  benchmark::RegisterBenchmark(
      "BM_Memcpy/96MiB", [](benchmark::State& s) { Memcpy(s, 96ll << 20); })
      ->Unit(benchmark::kMillisecond)
      ->MinTime(0.3)
      ->UseRealTime();
}

void Register() {
  for (bool pack : PackVariants()) RegisterWith(pack);
  RegisterProbes();
}

void RegisterWith(bool pack) {
  for (int threads : {1, 2}) {
    for (int64_t tokens : {1, 4, 5, 8, 16, 64, 512}) {
      benchmark::RegisterBenchmark(
          ("BM_SmolLM2Matmuls/Q4_1/tokens:" + std::to_string(tokens) +
           "/threads:" + std::to_string(threads) + Suffix(pack))
              .c_str(),
          [=](benchmark::State& s) {
            ModelMatmuls(s, DType::kQ4_1, tokens, threads, pack);
          })
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.5)
          ->UseRealTime();
    }
  }
  // Float weights: the GEMM kernel from kGemmMinTokens tokens on, mat-vec
  // tiles below.
  for (DType type : {DType::kF16, DType::kBF16}) {
    for (int threads : {1, 2}) {
      for (int64_t tokens : {1, 8, 12, 16, 32, 64, 512}) {
        benchmark::RegisterBenchmark(
            ("BM_SmolLM2Matmuls/" + std::string(DTypeName(type)) + "/tokens:" +
             std::to_string(tokens) + "/threads:" + std::to_string(threads) +
             Suffix(pack))
                .c_str(),
            [=](benchmark::State& s) {
              ModelMatmuls(s, type, tokens, threads, pack);
            })
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.5)
            ->UseRealTime();
      }
    }
  }
  for (DType type : kTypes) {
    for (const Shape& sh : kShapes) {
      for (int threads : {1, 2}) {
        const std::string name =
            std::string(DTypeName(type)) + "/" + std::to_string(sh.rows) + "x" +
            std::to_string(sh.cols) + "/threads:" + std::to_string(threads) +
            Suffix(pack);
        benchmark::RegisterBenchmark(("BM_MatVec/" + name).c_str(),
                                     [=](benchmark::State& s) {
                                       MatVec(s, type, sh.rows, sh.cols,
                                              threads, pack);
                                     })
            ->Unit(benchmark::kMicrosecond)
            ->MinTime(0.2)
            ->UseRealTime();
      }
    }
  }
  for (DType type : kTypes) {
    for (const Shape& sh : kShapes) {
      for (int threads : {1, 2}) {
        const int64_t tokens = sh.rows > 10000 ? 64 : 256;
        benchmark::RegisterBenchmark(
            ("BM_Gemm/" + std::string(DTypeName(type)) + "/" +
             std::to_string(sh.rows) + "x" + std::to_string(sh.cols) +
             "/tokens:" + std::to_string(tokens) +
             "/threads:" + std::to_string(threads) + Suffix(pack))
                .c_str(),
            [=](benchmark::State& s) {
              Gemm(s, type, sh.rows, sh.cols, tokens, threads, pack);
            })
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.2)
            ->UseRealTime();
      }
    }
  }
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) {
  pdserve::Register();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
