// Micro-benchmarks of the CUDA kernels (kernels/cuda/cuda_kernels.h) on
// Qwen3-4B shapes (32 query heads, 8 KV heads, head_dim 128, hidden 2560,
// FFN 9728). Bandwidth figures are fractions of the HBM read bandwidth
// measured at start (frac_hbm) and of the H200's datasheet (frac_hbm_spec);
// compute figures of the datasheet's peaks (constants below, in one place).
// Output: one JSON object per line, e.g.
//   {"bench":"decode_attention","ctx":32768,"batch":8,"us":...,
//    "gb_per_s":...,"frac_hbm":...}
// Usage: gpu_kernels_bench [--quick]   (--quick: fewer iterations)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "kernels/cuda/cuda_kernels.h"

namespace pdserve::cuda {
namespace {

// Peaks of the NVIDIA H200 SXM (datasheet figures).
constexpr double kHbmBytesPerSec = 4.8e12;   // HBM3e
constexpr double kFp32SimtFlops = 67e12;     // FP32 (non-tensor)
constexpr double kBf16TensorFlops = 989e12;  // dense BF16 tensor core

// The device's HBM read bandwidth measured at start (cuda::ReadSweep over
// 2 GiB, or a quarter of free memory, best of 5): the frac_hbm figures'
// peak. The datasheet's stays in frac_hbm_spec.
double g_hbm_measured = 0.0;

// Qwen3-4B attention shape.
constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128;
constexpr int kPageSize = 16;

int g_iters = 20;

#define BENCH_CHECK(expr)                                      \
  do {                                                         \
    const cudaError_t _e = (expr);                             \
    if (_e != cudaSuccess) {                                   \
      std::fprintf(stderr, "%s failed: %s / %s\n", #expr,      \
                   cudaGetErrorString(_e), LastErrorDetail()); \
      std::exit(1);                                            \
    }                                                          \
  } while (0)

template <typename T>
T* DeviceAlloc(size_t n) {
  void* p = nullptr;
  BENCH_CHECK(cudaMalloc(&p, n * sizeof(T)));
  BENCH_CHECK(cudaMemset(p, 0, n * sizeof(T)));
  return static_cast<T*>(p);
}

template <typename T>
T* DeviceCopy(const std::vector<T>& v) {
  T* p = DeviceAlloc<T>(v.size());
  BENCH_CHECK(
      cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

// Fills device floats with small values (so softmax/exp do real work).
void FillRandom(float* p, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  const size_t chunk = 1 << 22;
  std::vector<float> host(std::min(n, chunk));
  for (float& x : host) x = d(rng);
  for (size_t off = 0; off < n; off += chunk) {
    const size_t len = std::min(chunk, n - off);
    BENCH_CHECK(cudaMemcpy(p + off, host.data(), len * sizeof(float),
                           cudaMemcpyHostToDevice));
  }
}

// Mean microseconds per call of fn() over g_iters calls after 3 warm-ups.
template <typename Fn>
double TimeUs(Fn fn) {
  for (int i = 0; i < 3; ++i) fn();
  cudaEvent_t a, b;
  BENCH_CHECK(cudaEventCreate(&a));
  BENCH_CHECK(cudaEventCreate(&b));
  BENCH_CHECK(cudaEventRecord(a));
  for (int i = 0; i < g_iters; ++i) fn();
  BENCH_CHECK(cudaEventRecord(b));
  BENCH_CHECK(cudaEventSynchronize(b));
  float ms = 0.0f;
  BENCH_CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms * 1000.0 / g_iters;
}

// Bytes/s of the fastest of 5 ReadSweep passes over a buffer far larger
// than L2 (0 when it cannot be allocated).
double MeasureHbm() {
  size_t free_b = 0, total_b = 0;
  BENCH_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const int64_t bytes =
      std::min<int64_t>(int64_t{2} << 30, free_b / 4) / 16 * 16;
  void* buf = nullptr;
  if (bytes < (int64_t{64} << 20) || cudaMalloc(&buf, bytes) != cudaSuccess) {
    cudaGetLastError();
    return 0.0;
  }
  BENCH_CHECK(cudaMemset(buf, 1, bytes));
  unsigned long long* sum = DeviceAlloc<unsigned long long>(1);
  const int iters = g_iters;
  g_iters = 1;
  double best_us = 0.0;
  for (int r = 0; r < 5; ++r) {
    const double us =
        TimeUs([&] { BENCH_CHECK(ReadSweep(buf, bytes, sum, nullptr)); });
    if (r == 0 || us < best_us) best_us = us;
  }
  g_iters = iters;
  cudaFree(sum);
  cudaFree(buf);
  return bytes / (best_us * 1e-6);
}

// "frac_hbm" (of the measured peak) and "frac_hbm_spec" of bytes per us.
std::string HbmFractions(double bytes, double us) {
  const double bps = bytes / (us * 1e-6);
  char out[96];
  std::snprintf(
      out, sizeof(out), "\"frac_hbm\":%.3f,\"frac_hbm_spec\":%.3f",
      g_hbm_measured > 0.0 ? bps / g_hbm_measured : bps / kHbmBytesPerSec,
      bps / kHbmBytesPerSec);
  return out;
}

// A one-layer paged cache holding `batch` sequences of `ctx` positions with
// shuffled page tables, plus the batch arrays for `q_len` new rows each.
struct PagedSetup {
  DeviceKvCache kv;
  AttentionBatch batch;
  AttentionShape shape{kHeads, kKvHeads, kHeadDim, 0.0f};
  float* q = nullptr;
  float* out = nullptr;
};

PagedSetup MakePaged(int batch, int ctx, int q_len,
                     KvType type = KvType::kF32) {
  PagedSetup s;
  const int64_t kv_dim = kKvHeads * kHeadDim;
  const int64_t pages_per_seq = (ctx + kPageSize - 1) / kPageSize;
  const int64_t num_pages = pages_per_seq * batch;
  s.kv.num_layers = 1;
  s.kv.kv_dim = kv_dim;
  s.kv.page_size = kPageSize;
  s.kv.num_pages = num_pages;
  s.kv.page_stride_floats = 2 * kPageSize * kv_dim;  // elements
  s.kv.type = type;
  const int64_t elems = num_pages * s.kv.page_stride_floats;
  if (type == KvType::kBF16) {
    // bf16 bits of values in about [-1, 1]: one random page, repeated.
    std::vector<uint16_t> host(s.kv.page_stride_floats);
    std::mt19937 rng(1);
    for (uint16_t& h : host) {
      h = static_cast<uint16_t>(0x3c00 + (rng() & 0x3ff) + ((rng() & 1) << 15));
    }
    uint16_t* d = DeviceAlloc<uint16_t>(elems);
    for (int64_t p = 0; p < num_pages; ++p) {
      BENCH_CHECK(cudaMemcpy(d + p * s.kv.page_stride_floats, host.data(),
                             host.size() * 2, cudaMemcpyHostToDevice));
    }
    s.kv.data = reinterpret_cast<float*>(d);
  } else {
    s.kv.data = DeviceAlloc<float>(elems);
    FillRandom(s.kv.data, elems, 1);
  }
  std::vector<int32_t> pages(num_pages);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), std::mt19937(2));
  std::vector<int32_t> q_start = {0}, start, page_start = {0};
  for (int i = 0; i < batch; ++i) {
    q_start.push_back(q_start.back() + q_len);
    start.push_back(ctx - q_len);
    page_start.push_back(page_start.back() +
                         static_cast<int32_t>(pages_per_seq));
  }
  s.batch.num_seqs = batch;
  s.batch.q_start = DeviceCopy(q_start);
  s.batch.start_pos = DeviceCopy(start);
  s.batch.page_start = DeviceCopy(page_start);
  s.batch.page_table = DeviceCopy(pages);
  s.batch.max_q_len = q_len;
  s.batch.max_kv_len = ctx;
  s.batch.total_rows = batch * q_len;
  const int64_t rows = static_cast<int64_t>(batch) * q_len;
  s.q = DeviceAlloc<float>(rows * kHeads * kHeadDim);
  FillRandom(s.q, rows * kHeads * kHeadDim, 3);
  s.out = DeviceAlloc<float>(rows * kHeads * kHeadDim);
  return s;
}

void FreePaged(PagedSetup& s) {
  cudaFree(s.kv.data);
  cudaFree(const_cast<int32_t*>(s.batch.q_start));
  cudaFree(const_cast<int32_t*>(s.batch.start_pos));
  cudaFree(const_cast<int32_t*>(s.batch.page_start));
  cudaFree(const_cast<int32_t*>(s.batch.page_table));
  cudaFree(s.q);
  cudaFree(s.out);
}

void BenchDecodeAttention(int batch, int ctx, KvType type = KvType::kF32) {
  PagedSetup s = MakePaged(batch, ctx, 1, type);
  const int elem = type == KvType::kBF16 ? 2 : 4;
  const int64_t ws_bytes = DecodeAttentionWorkspaceBytes(s.shape, batch, ctx);
  uint8_t* ws = DeviceAlloc<uint8_t>(std::max<int64_t>(ws_bytes, 16));
  const int64_t width = kHeads * kHeadDim;
  const double us = TimeUs([&] {
    BENCH_CHECK(DecodeAttention(s.kv, 0, s.batch, s.shape, s.q, width, s.out,
                                width, ws, ws_bytes, nullptr));
  });
  const double bytes =
      static_cast<double>(batch) * ctx * kKvHeads * kHeadDim * 2 * elem;
  std::printf(
      "{\"bench\":\"decode_attention\",\"kv\":\"%s\",\"ctx\":%d,"
      "\"batch\":%d,\"heads\":%d,\"kv_heads\":%d,\"head_dim\":%d,"
      "\"us\":%.2f,\"kv_bytes\":%.0f,\"gb_per_s\":%.1f,%s}\n",
      elem == 2 ? "bf16" : "f32", ctx, batch, kHeads, kKvHeads, kHeadDim, us,
      bytes, bytes / us * 1e-3, HbmFractions(bytes, us).c_str());
  cudaFree(ws);
  FreePaged(s);
}

// Causal prefill attention of one seq_len-token prompt: the f32 SIMT kernel
// (f32 cache; fraction of the f32 SIMT peak) or, with `flash`, the
// tensor-core FlashPrefillAttention (bf16 cache; of the dense bf16 peak).
void BenchPrefillAttention(int seq_len, bool flash) {
  PagedSetup s =
      MakePaged(1, seq_len, seq_len, flash ? KvType::kBF16 : KvType::kF32);
  const int64_t width = kHeads * kHeadDim;
  const auto kernel = flash ? FlashPrefillAttention : PrefillAttention;
  const double us = TimeUs([&] {
    BENCH_CHECK(
        kernel(s.kv, 0, s.batch, s.shape, s.q, width, s.out, width, nullptr));
  });
  // Causal: row i sees i + 1 keys; QK^T and PV, 2 flops per multiply-add.
  const double keys = static_cast<double>(seq_len) * (seq_len + 1) / 2;
  const double flops = 4.0 * keys * kHeadDim * kHeads;
  std::printf(
      "{\"bench\":\"%s\",\"tokens\":%d,\"us\":%.1f,"
      "\"tflop_per_s\":%.2f,\"%s\":%.3f}\n",
      flash ? "flash_prefill_attention" : "prefill_attention", seq_len, us,
      flops / us * 1e-6, flash ? "frac_bf16_tensor" : "frac_fp32_simt",
      flops / (us * 1e-6) / (flash ? kBf16TensorFlops : kFp32SimtFlops));
  FreePaged(s);
}

void BenchMatVec(WType type, const char* name, int64_t rows, int64_t cols,
                 int64_t tokens) {
  int64_t row_bytes = 0;
  switch (type) {
    case WType::kBF16:
    case WType::kF16:
      row_bytes = cols * 2;
      break;
    case WType::kF32:
      row_bytes = cols * 4;
      break;
    case WType::kQ8_0:
      row_bytes = cols / 32 * 34;
      break;
    case WType::kQ4_0:
      row_bytes = cols / 32 * 18;
      break;
    case WType::kQ4_1:
      row_bytes = cols / 32 * 20;
      break;
  }
  // Random bytes: finite for bf16 when the exponent bits are masked; zeros
  // would do for timing, but keep the arithmetic realistic.
  std::vector<uint8_t> host(rows * row_bytes);
  std::mt19937 rng(4);
  for (size_t i = 0; i < host.size(); ++i) host[i] = rng() & 0x3f;
  uint8_t* w = DeviceCopy(host);
  float* x = DeviceAlloc<float>(tokens * cols);
  FillRandom(x, tokens * cols, 5);
  float* y = DeviceAlloc<float>(tokens * rows);
  const DeviceMatrix m{type, rows, cols, row_bytes, w};
  const double us = TimeUs(
      [&] { BENCH_CHECK(MatVec(m, x, cols, tokens, y, rows, nullptr)); });
  const double bytes = static_cast<double>(rows) * row_bytes;
  std::printf(
      "{\"bench\":\"matvec\",\"type\":\"%s\",\"rows\":%lld,"
      "\"cols\":%lld,\"tokens\":%lld,\"us\":%.2f,\"gb_per_s\":%.1f,%s}\n",
      name, static_cast<long long>(rows), static_cast<long long>(cols),
      static_cast<long long>(tokens), us, bytes / us * 1e-3,
      HbmFractions(bytes, us).c_str());
  cudaFree(w);
  cudaFree(x);
  cudaFree(y);
}

void BenchGemm(int64_t rows, int64_t cols, int64_t tokens) {
  CublasGemm gemm;
  BENCH_CHECK(gemm.Init());
  uint16_t* w = DeviceAlloc<uint16_t>(rows * cols);  // zeros: bf16 0.0
  float* x = DeviceAlloc<float>(tokens * cols);
  float* y = DeviceAlloc<float>(tokens * rows);
  const int64_t sb = CublasGemm::ScratchBytes(WType::kBF16, cols, tokens);
  uint8_t* scratch = DeviceAlloc<uint8_t>(sb);
  const DeviceMatrix m{WType::kBF16, rows, cols, cols * 2, w};
  const double us = TimeUs([&] {
    BENCH_CHECK(gemm.Run(m, x, cols, tokens, y, rows, scratch, sb, nullptr));
  });
  const double flops = 2.0 * rows * cols * tokens;
  std::printf(
      "{\"bench\":\"cublas_gemm_bf16\",\"rows\":%lld,\"cols\":%lld,"
      "\"tokens\":%lld,\"us\":%.1f,\"tflop_per_s\":%.1f,"
      "\"frac_bf16_tensor\":%.3f}\n",
      static_cast<long long>(rows), static_cast<long long>(cols),
      static_cast<long long>(tokens), us, flops / us * 1e-6,
      flops / (us * 1e-6) / kBf16TensorFlops);
  cudaFree(w);
  cudaFree(x);
  cudaFree(y);
  cudaFree(scratch);
}

void BenchSampling(int64_t rows, int64_t vocab) {
  float* logits = DeviceAlloc<float>(rows * vocab);
  FillRandom(logits, rows * vocab, 6);
  struct Mode {
    const char* name;
    SampleParams p;
  };
  const Mode modes[] = {{"greedy", {0.0f, 0, 1.0f, 0.0f, 1, 0}},
                        {"temperature", {0.8f, 0, 1.0f, 0.0f, 1, 0}},
                        {"top_k50_top_p0.9", {0.8f, 50, 0.9f, 0.0f, 1, 0}}};
  int32_t* tokens = DeviceAlloc<int32_t>(rows);
  float* lp = DeviceAlloc<float>(rows);
  for (const Mode& m : modes) {
    SampleParams* params = DeviceCopy(std::vector<SampleParams>(rows, m.p));
    const double us = TimeUs([&] {
      BENCH_CHECK(
          SampleRows(logits, rows, vocab, vocab, params, tokens, lp, nullptr));
    });
    std::printf(
        "{\"bench\":\"sample_rows\",\"mode\":\"%s\",\"rows\":%lld,"
        "\"vocab\":%lld,\"us\":%.1f}\n",
        m.name, static_cast<long long>(rows), static_cast<long long>(vocab),
        us);
    cudaFree(params);
  }
  cudaFree(logits);
  cudaFree(tokens);
  cudaFree(lp);
}

}  // namespace
}  // namespace pdserve::cuda

int main(int argc, char** argv) {
  using namespace pdserve::cuda;  // NOLINT
  bool quick = false;
  pdserve::bench::BenchFlags("gpu_kernels_bench [--quick]")
      .Switch("quick", &quick)
      .Parse(argc, argv);
  if (quick) g_iters = 5;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("{\"bench\":\"gpu_kernels\",\"skipped\":\"no CUDA device\"}\n");
    return 0;
  }
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  g_hbm_measured = MeasureHbm();
  std::printf(
      "{\"bench\":\"device\",\"name\":\"%s\",\"sms\":%d,"
      "\"peak_hbm_gb_per_s\":%.0f,\"measured_hbm_gb_per_s\":%.0f}\n",
      prop.name, prop.multiProcessorCount, kHbmBytesPerSec * 1e-9,
      g_hbm_measured * 1e-9);
  for (int ctx : {4096, 32768}) BenchDecodeAttention(8, ctx);
  BenchDecodeAttention(1, 32768);
  for (int ctx : {4096, 32768}) BenchDecodeAttention(8, ctx, KvType::kBF16);
  BenchMatVec(WType::kBF16, "bf16", 4096, 12288, 1);
  BenchMatVec(WType::kBF16, "bf16", 12288, 4096, 1);
  BenchMatVec(WType::kBF16, "bf16", 4096, 12288, 8);
  BenchMatVec(WType::kQ8_0, "q8_0", 4096, 12288, 1);
  BenchMatVec(WType::kQ4_0, "q4_0", 4096, 12288, 1);
  BenchPrefillAttention(4096, /*flash=*/false);
  BenchPrefillAttention(4096, /*flash=*/true);
  BenchGemm(9728, 2560, 4096);
  BenchSampling(8, 151936);
  return 0;
}
