// Physical limits of this CPU, measured, for reading the engine benchmarks as
// a fraction of them (bench/cpu_compare.py runs it in the same run as the
// engines, at the same thread counts):
//   read_gb_s     streaming read bandwidth (read_probe.h): each thread sums
//                 its slice of a buffer far larger than the last-level cache,
//                 best of --passes; bytes read / wall time
//   copy_gb_s     the engine metrics' start-up probe (MeasureHostCopyBandwidth:
//                 memcpy, bytes read + written), for comparison
//   fp32_fma_gflops   the better of fp32_fma256_gflops (vfmadd231ps ymm, 10
//                 independent chains per thread) and fp32_fma512_gflops
//                 (zmm, 16 chains, when the CPU has AVX-512F)
//   int8_gops     AVX2 int8 dot step of the quantized kernels: vpmaddubsw
//                 (u8 x s8 -> s16 pairs) + vpmaddwd (-> s32) + vpaddd; ops =
//                 2 x 32 multiply-adds per vpmaddubsw
//   int8_vnni_gops    vpdpbusd (AVX512-VNNI zmm, 16 chains, or AVX-VNNI ymm)
//                 when the CPU has it; 2 x 4 x lanes ops per instruction
//   bf16_gflops   vdpbf16ps zmm (AVX512-BF16, 16 chains) when the CPU has
//                 it; 2 x 32 flops per instruction
// Absent ISAs are reported as null with the reason.
//
//   peak_bench [--threads 1,2] [--read-mib 1024] [--passes 5] [--ms 300]
//
// Prints one JSON object on stdout: {"threads": {"1": {...}, "2": {...}}}.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/read_probe.h"
#include "kernels/thread_pool.h"
#include "nlohmann/json.hpp"
#include "common/metrics/bandwidth_probe.h"

namespace pdserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Runs fn(thread_index) on `threads` threads at once; returns wall seconds.
double RunParallel(int threads, const std::function<void(int)>& fn) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      fn(t);
    });
  }
  while (ready.load() < threads) {
  }
  const auto t0 = Clock::now();
  go.store(true, std::memory_order_release);
  for (std::thread& w : workers) w.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Each kernel runs `iters` iterations of its unrolled body per thread and
// returns the ops it did. The accumulators are named registers (an array
// would live on the stack at -O2), and the empty asm statements keep the
// compiler from hoisting or folding the loop-invariant operations.
#define PB_X8(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#define PB_X10(M) PB_X8(M) M(8) M(9)
#define PB_X16(M) PB_X10(M) M(10) M(11) M(12) M(13) M(14) M(15)

__attribute__((target("avx2,fma"))) double FmaKernel(int64_t iters) {
#define PB_DECL(j) __m256 a##j = _mm256_set1_ps(0.001f * j);
  PB_X10(PB_DECL)
#undef PB_DECL
  __m256 m = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-6f);
  for (int64_t i = 0; i < iters; ++i) {
#define PB_STEP(j) a##j = _mm256_fmadd_ps(a##j, m, c);
    PB_X10(PB_STEP)
#undef PB_STEP
    __asm__ volatile("" : "+x"(m), "+x"(c));
  }
  __m256 s = _mm256_setzero_ps();
#define PB_SUM(j) s = _mm256_add_ps(s, a##j);
  PB_X10(PB_SUM)
#undef PB_SUM
  volatile float sink = _mm256_cvtss_f32(s);
  (void)sink;
  return iters * 10.0 * 8 * 2;
}

__attribute__((target("avx512f"))) double Fma512Kernel(int64_t iters) {
#define PB_DECL(j) __m512 a##j = _mm512_set1_ps(0.001f * j);
  PB_X16(PB_DECL)
#undef PB_DECL
  __m512 m = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(1e-6f);
  for (int64_t i = 0; i < iters; ++i) {
#define PB_STEP(j) a##j = _mm512_fmadd_ps(a##j, m, c);
    PB_X16(PB_STEP)
#undef PB_STEP
    __asm__ volatile("" : "+v"(m), "+v"(c));
  }
  __m512 s = _mm512_setzero_ps();
#define PB_SUM(j) s = _mm512_add_ps(s, a##j);
  PB_X16(PB_SUM)
#undef PB_SUM
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  volatile float sink = lanes[0] + lanes[15];
  (void)sink;
  return iters * 16.0 * 16 * 2;
}

__attribute__((target("avx2"))) double Int8Kernel(int64_t iters) {
  // The AVX2 int8 dot step: u8 x s8 -> s16 pairs -> s32, accumulated. Each
  // chain feeds its accumulator back as the u8 operand (7-cycle chains; 8
  // of them keep both multiply ports busy on Zen 3 / Intel).
#define PB_DECL(j) __m256i a##j = _mm256_set1_epi32(j + 1);
  PB_X8(PB_DECL)
#undef PB_DECL
  __m256i s = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < iters; ++i) {
#define PB_STEP(j) \
  a##j = _mm256_add_epi32(a##j, _mm256_madd_epi16(_mm256_maddubs_epi16(a##j, s), ones));
    PB_X8(PB_STEP)
#undef PB_STEP
  }
  __m256i t = _mm256_setzero_si256();
#define PB_SUM(j) t = _mm256_add_epi32(t, a##j);
  PB_X8(PB_SUM)
#undef PB_SUM
  volatile int sink = _mm256_extract_epi32(t, 0);
  (void)sink;
  return iters * 8.0 * 32 * 2;
}

__attribute__((target("avx512f,avx512vnni"))) double Vnni512Kernel(int64_t iters) {
#define PB_DECL(j) __m512i a##j = _mm512_set1_epi32(j);
  PB_X16(PB_DECL)
#undef PB_DECL
  __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
#define PB_STEP(j) a##j = _mm512_dpbusd_epi32(a##j, u, s);
    PB_X16(PB_STEP)
#undef PB_STEP
    __asm__ volatile("" : "+v"(u), "+v"(s));
  }
  __m512i t = _mm512_setzero_si512();
#define PB_SUM(j) t = _mm512_add_epi32(t, a##j);
  PB_X16(PB_SUM)
#undef PB_SUM
  alignas(64) int lanes[16];
  _mm512_store_si512(lanes, t);
  volatile int sink = lanes[0] + lanes[15];
  (void)sink;
  return iters * 16.0 * 64 * 2;
}

__attribute__((target("avx2,avxvnni"))) double Vnni256Kernel(int64_t iters) {
#define PB_DECL(j) __m256i a##j = _mm256_set1_epi32(j);
  PB_X10(PB_DECL)
#undef PB_DECL
  __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
#define PB_STEP(j) a##j = _mm256_dpbusd_avx_epi32(a##j, u, s);
    PB_X10(PB_STEP)
#undef PB_STEP
    __asm__ volatile("" : "+x"(u), "+x"(s));
  }
  __m256i t = _mm256_setzero_si256();
#define PB_SUM(j) t = _mm256_add_epi32(t, a##j);
  PB_X10(PB_SUM)
#undef PB_SUM
  volatile int sink = _mm256_extract_epi32(t, 0);
  (void)sink;
  return iters * 10.0 * 32 * 2;
}

__attribute__((target("avx512f,avx512bf16"))) double Bf16Kernel(int64_t iters) {
#define PB_DECL(j) __m512 a##j = _mm512_set1_ps(0.001f * j);
  PB_X16(PB_DECL)
#undef PB_DECL
  __m512i x = _mm512_set1_epi16(0x3f80), y = _mm512_set1_epi16(0x3380);
  for (int64_t i = 0; i < iters; ++i) {
#define PB_STEP(j) a##j = _mm512_dpbf16_ps(a##j, (__m512bh)x, (__m512bh)y);
    PB_X16(PB_STEP)
#undef PB_STEP
    __asm__ volatile("" : "+v"(x), "+v"(y));
  }
  __m512 t = _mm512_setzero_ps();
#define PB_SUM(j) t = _mm512_add_ps(t, a##j);
  PB_X16(PB_SUM)
#undef PB_SUM
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, t);
  volatile float sink = lanes[0] + lanes[15];
  (void)sink;
  return iters * 16.0 * 32 * 2;
}

// Best-of-`reps` giga-ops/s of `kernel` on `threads` threads, each run
// lasting about `ms` milliseconds.
double PeakGops(int threads, int ms, int reps, double (*kernel)(int64_t)) {
  int64_t iters = 1 << 14;
  for (;;) {  // calibrate on one thread
    const auto t0 = Clock::now();
    kernel(iters);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s > ms * 1e-3 / 4) {
      iters = static_cast<int64_t>(iters * (ms * 1e-3) / s);
      break;
    }
    iters *= 4;
  }
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<double> ops(threads);
    const double s = RunParallel(threads, [&](int t) { ops[t] = kernel(iters); });
    double total = 0;
    for (double o : ops) total += o;
    best = std::max(best, total / s);
  }
  return best * 1e-9;
}

nlohmann::json Optional(bool has, const char* why, int threads, int ms,
                        double (*kernel)(int64_t)) {
  if (!has) return {{"value", nullptr}, {"reason", why}};
  return {{"value", PeakGops(threads, ms, 3, kernel)}};
}

int Main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  int64_t read_mib = 1024;
  int passes = 5, ms = 300;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    bool ok = true;
    if (a == "--threads") {
      threads.clear();
      for (absl::string_view p : absl::StrSplit(v, ',', absl::SkipEmpty())) {
        int t = 0;
        ok = ok && absl::SimpleAtoi(p, &t) && t >= 1;
        threads.push_back(t);
      }
    } else if (a == "--read-mib") {
      ok = absl::SimpleAtoi(v, &read_mib) && read_mib >= 1;
    } else if (a == "--passes") {
      ok = absl::SimpleAtoi(v, &passes) && passes >= 1;
    } else if (a == "--ms") {
      ok = absl::SimpleAtoi(v, &ms) && ms >= 1;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "bad argument %s %s\n", a.c_str(), v.c_str());
      return 2;
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr,
                 "usage: peak_bench [--threads 1,2] [--read-mib 1024] "
                 "[--passes 5] [--ms 300]\n");
    return 2;
  }
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!avx2) {
    std::fprintf(stderr, "peak_bench needs AVX2 and FMA\n");
    return 1;
  }
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool vnni512 = __builtin_cpu_supports("avx512vnni");
  const bool vnni256 = __builtin_cpu_supports("avxvnni");
  const bool bf16 = __builtin_cpu_supports("avx512bf16");
  nlohmann::json out;
  out["read_mib"] = read_mib;
  for (int t : threads) {
    nlohmann::json r;
    {
      ThreadPool pool(t);
      r["read_gb_s"] = StreamReadGbPerS(read_mib << 20, pool, passes);
    }
    auto copy = metrics::MeasureHostCopyBandwidth(
        {.buffer_bytes = 256 << 20, .reps = passes, .threads = t});
    r["copy_gb_s"] = copy.ok() ? copy->bytes_per_second * 1e-9 : 0.0;
    r["fp32_fma256_gflops"] = PeakGops(t, ms, 3, FmaKernel);
    r["fp32_fma512_gflops"] = Optional(avx512, "no AVX-512F", t, ms, Fma512Kernel);
    r["fp32_fma_gflops"] = std::max(
        r["fp32_fma256_gflops"].get<double>(),
        avx512 ? r["fp32_fma512_gflops"]["value"].get<double>() : 0.0);
    r["int8_gops"] = PeakGops(t, ms, 3, Int8Kernel);
    r["int8_vnni_gops"] =
        vnni512 ? Optional(true, "", t, ms, Vnni512Kernel)
                : Optional(vnni256, "no AVX512-VNNI or AVX-VNNI", t, ms, Vnni256Kernel);
    r["bf16_gflops"] = Optional(bf16, "no AVX512-BF16 (bf16 runs as f32 FMA)", t,
                                ms, Bf16Kernel);
    out["threads"][std::to_string(t)] = r;
    std::fprintf(stderr,
                 "threads=%d read %.1f GB/s copy %.1f GB/s fp32 %.0f GFLOP/s "
                 "int8 %.0f GOP/s\n",
                 t, r["read_gb_s"].get<double>(), r["copy_gb_s"].get<double>(),
                 r["fp32_fma_gflops"].get<double>(), r["int8_gops"].get<double>());
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace pdserve::bench

int main(int argc, char** argv) { return pdserve::bench::Main(argc, argv); }
