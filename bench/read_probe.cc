#include "bench/read_probe.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include <sys/mman.h>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace pdserve::bench {
namespace {

#if defined(__x86_64__)
__attribute__((target("avx512f"))) float SumFloatsAvx512(const float* a,
                                                         int64_t n) {
  __m512 s[8];
  for (__m512& v : s) v = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 128 <= n; i += 128) {
    for (int k = 0; k < 8; ++k) {
      s[k] = _mm512_add_ps(s[k], _mm512_loadu_ps(a + i + 16 * k));
    }
  }
  for (int k = 1; k < 8; ++k) s[0] = _mm512_add_ps(s[0], s[k]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s[0]);
  float r = 0.0f;
  for (float v : lanes) r += v;
  for (; i < n; ++i) r += a[i];
  return r;
}

// Four streams at once (the quarters of [a, a + n)), two vectors each per
// step: the decode kernels read 4 row groups as 4 streams, and one stream
// alone does not reach this CPU's read bandwidth.
__attribute__((target("avx512f"))) float SumFloats4StreamsAvx512(const float* a,
                                                                 int64_t n) {
  const int64_t q = n / 4 / 32 * 32;
  const float* p[4] = {a, a + q, a + 2 * q, a + 3 * q};
  __m512 s[8];
  for (__m512& v : s) v = _mm512_setzero_ps();
  for (int64_t i = 0; i < q; i += 32) {
    for (int k = 0; k < 4; ++k) {
      s[2 * k] = _mm512_add_ps(s[2 * k], _mm512_loadu_ps(p[k] + i));
      s[2 * k + 1] = _mm512_add_ps(s[2 * k + 1], _mm512_loadu_ps(p[k] + i + 16));
    }
  }
  for (int k = 1; k < 8; ++k) s[0] = _mm512_add_ps(s[0], s[k]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s[0]);
  float r = 0.0f;
  for (float v : lanes) r += v;
  for (int64_t i = 4 * q; i < n; ++i) r += a[i];
  return r;
}

__attribute__((target("avx2"))) float SumFloatsAvx2(const float* a, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(a + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(a + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(a + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(a + i + 24));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  float r = 0.0f;
  for (float v : lanes) r += v;
  for (; i < n; ++i) r += a[i];
  return r;
}
#endif

}  // namespace

float SumFloats(const float* a, int64_t n) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx512) return SumFloatsAvx512(a, n);
  if (avx2) return SumFloatsAvx2(a, n);
#endif
  int64_t i = 0;
  float s = 0.0f;
#if defined(__SSE2__)
  __m128 s0 = _mm_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm_add_ps(s0, _mm_loadu_ps(a + i));
    s1 = _mm_add_ps(s1, _mm_loadu_ps(a + i + 4));
    s2 = _mm_add_ps(s2, _mm_loadu_ps(a + i + 8));
    s3 = _mm_add_ps(s3, _mm_loadu_ps(a + i + 12));
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_add_ps(_mm_add_ps(s0, s1), _mm_add_ps(s2, s3)));
  s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
#endif
  for (; i < n; ++i) s += a[i];
  return s;
}

namespace {

float SumFloats4Streams(const float* a, int64_t n) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return SumFloats4StreamsAvx512(a, n);
#endif
  return SumFloats(a, n);
}

}  // namespace

namespace {

// A buffer on transparent huge pages where the kernel gives them (as the
// engine's packed weights are: packed_weights.cc): with 4 KiB pages the
// probe also measured TLB misses the decode kernels never pay, and read
// 20-30% below what a 1.7B decode then streamed.
struct HugeBuffer {
  explicit HugeBuffer(int64_t bytes) : size(RoundUp(bytes)) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      fallback.reset(new float[bytes / 4 + 1]);
      data = fallback.get();
      return;
    }
#ifdef MADV_HUGEPAGE
    madvise(p, size, MADV_HUGEPAGE);
#endif
    data = static_cast<float*>(p);
  }
  ~HugeBuffer() {
    if (fallback == nullptr && data != nullptr) munmap(data, size);
  }
  static size_t RoundUp(int64_t b) {
    constexpr int64_t kHuge = 2 << 20;
    return static_cast<size_t>((b + kHuge - 1) / kHuge * kHuge);
  }
  size_t size;
  float* data = nullptr;
  std::unique_ptr<float[]> fallback;
};

}  // namespace

double StreamReadGbPerS(int64_t bytes, ThreadPool& pool, int passes) {
  const int64_t n = bytes / 4;
  const int64_t parts = pool.num_threads();
  HugeBuffer buffer(bytes);
  float* const a_data = buffer.data;
  std::vector<float> partial(parts);
  auto slice = [&](int64_t i) { return std::make_pair(n * i / parts, n * (i + 1) / parts); };
  pool.ParallelFor(parts, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      auto [lo, hi] = slice(i);
      std::fill(a_data + lo, a_data + hi, 1.0f);
    }
  });
  double best = 0;
  // Passes alternate one stream and four streams per thread.
  for (int pass = 0; pass < 2 * passes; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.ParallelFor(parts, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        auto [lo, hi] = slice(i);
        partial[i] = pass % 2 == 0 ? SumFloats(a_data + lo, hi - lo)
                                   : SumFloats4Streams(a_data + lo, hi - lo);
      }
    });
    const double sec =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    if (partial[0] != -1.0f) best = std::max(best, bytes / sec);
  }
  return best * 1e-9;
}

}  // namespace pdserve::bench
