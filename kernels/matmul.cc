// MatMul dispatcher: picks the SIMD level once, prepares quantized
// activations into a reused scratch buffer and splits output rows over the
// thread pool.
#include "kernels/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/matmul_internal.h"

#if defined(__x86_64__)
#include <cpuid.h>

#include "kernels/matmul_avx512_internal.h"
#endif

namespace pdserve {
namespace kernels_internal {
namespace {

enum class Level { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

#if defined(__x86_64__) && defined(PDSERVE_HAVE_X86_KERNELS)
uint64_t XGetBv() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return static_cast<uint64_t>(hi) << 32 | lo;
}
#endif

// Reads CPUID directly (rather than __builtin_cpu_supports, whose libgcc
// state is not reliably initialised when this library is linked statically
// into a PIC program) and checks that the OS saves the wide registers.
Level DetectLevel() {
#if defined(__x86_64__) && defined(PDSERVE_HAVE_X86_KERNELS)
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return Level::kScalar;
  const bool fma = ecx & (1u << 12), osxsave = ecx & (1u << 27),
             avx = ecx & (1u << 28), f16c = ecx & (1u << 29);
  if (!osxsave || !avx) return Level::kScalar;
  const uint64_t xcr0 = XGetBv();
  if ((xcr0 & 0x6) != 0x6) return Level::kScalar;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return Level::kScalar;
  const bool avx2 = ebx & (1u << 5);
  const bool avx512 = (ebx & (1u << 16)) && (ebx & (1u << 17)) &&  // F, DQ
                      (ebx & (1u << 30)) && (ebx & (1u << 31)) &&  // BW, VL
                      (ecx & (1u << 11)) &&                        // VNNI
                      (xcr0 & 0xe0) == 0xe0;  // opmask + zmm state enabled
  if (avx2 && fma && f16c && avx512) return Level::kAvx512;
  if (avx2 && fma && f16c) return Level::kAvx2;
#endif
  return Level::kScalar;
}

Level ChooseLevel() {
  Level level = DetectLevel();
  // PDSERVE_ISA may only lower the level (a higher one may not be supported).
  if (const char* env = std::getenv("PDSERVE_ISA")) {
    Level want = level;
    if (std::strcmp(env, "scalar") == 0) want = Level::kScalar;
    if (std::strcmp(env, "avx2") == 0) want = Level::kAvx2;
    if (std::strcmp(env, "avx512") == 0) want = Level::kAvx512;
    level = std::min(level, want);
  }
  return level;
}

}  // namespace

std::vector<const IsaKernels*> SupportedKernels() {
  std::vector<const IsaKernels*> out = {&ScalarKernels()};
#if defined(__x86_64__) && defined(PDSERVE_HAVE_X86_KERNELS)
  const Level level = DetectLevel();
  if (level >= Level::kAvx2) out.push_back(&Avx2Kernels());
  if (level >= Level::kAvx512) out.push_back(&Avx512Kernels());
#endif
  return out;
}

#if defined(__x86_64__) && defined(PDSERVE_HAVE_X86_KERNELS)
// Pool workers size their GEMM buffer when they start (AVX-512 only).
void WarmWorkerGemmBuffer() {
  if (&ActiveKernels() == &Avx512Kernels()) avx512::ReserveGemmBuffer(1);
}
[[maybe_unused]] const bool kWorkerWarmRegistered =
    (RegisterWorkerThreadInit(&WarmWorkerGemmBuffer), true);
#endif

const IsaKernels& ActiveKernels() {
  static const IsaKernels* const kernels = [] {
    switch (ChooseLevel()) {
#if defined(__x86_64__) && defined(PDSERVE_HAVE_X86_KERNELS)
      case Level::kAvx512:
        return &Avx512Kernels();
      case Level::kAvx2:
        return &Avx2Kernels();
#endif
      default:
        return &ScalarKernels();
    }
  }();
  return *kernels;
}

namespace {

// Scratch for prepared activations: grows to the largest call seen on this
// thread and is then reused, so steady-state calls do not allocate.
uint8_t* Scratch(int64_t bytes) {
  thread_local AlignedScratch buf;
  return buf.Get(bytes);
}

}  // namespace

RowKernels KernelsFor(const IsaKernels& k, const WeightView& w) {
  if (w.packed != nullptr && k.packed != nullptr &&
      w.pack_format == k.packed->format) {
    const PackedKernels& p = *k.packed;
    return {p.row_tile, p.prepared_bytes, p.prepare,
            p.rows,     p.needs_prepare,  p.tiles_per_split};
  }
  return {k.row_tile, k.prepared_bytes, k.prepare,
          k.rows,     &IsQuantizedType, kTilesPerSplit};
}

int64_t PackedWeightBytesWith(const IsaKernels& k, const WeightView& w) {
  if (k.packed == nullptr || w.rows <= 0 || w.cols <= 0) return 0;
  return k.packed->packed_bytes(w.type, w.rows, w.cols);
}

WeightView PackWeightsWith(const IsaKernels& k, const WeightView& w,
                           void* dst) {
  if (PackedWeightBytesWith(k, w) == 0) return w;
  k.packed->pack(w, static_cast<uint8_t*>(dst));
  WeightView out = w;
  out.packed = dst;
  out.pack_format = k.packed->format;
  return out;
}

void MatMulWith(const IsaKernels& k, const WeightView& w, const float* x,
                int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride,
                ThreadPool& pool) {
  if (n_tokens <= 0 || w.rows <= 0) return;
  const RowKernels rk = KernelsFor(k, w);
#if defined(__x86_64__) && defined(PDSERVE_HAVE_X86_KERNELS)
  // The calling thread's GEMM buffer grows here, on the first call with a
  // new width, rather than inside a range it happens to run later.
  if (&k == &Avx512Kernels() && rk.rows == k.rows && !IsQuantized(w.type) &&
      avx512::FloatGemmTokens(n_tokens) > 0) {
    avx512::ReserveGemmBuffer(w.cols);
  }
#endif
  MatMulArgs args{&w, x, x_stride, nullptr, n_tokens, y, y_stride};
  if (rk.needs_prepare(w.type) && w.cols > 0) {
    uint8_t* xq = Scratch(rk.prepared_bytes(w.type, w.cols, n_tokens));
    // Quantizing one token costs about as much as a few rows of the product;
    // only fan out when there are enough tokens to pay for the wake-up, and
    // in groups of 16 tokens (the token-lane layouts interleave 16 tokens
    // per cache line: a split inside a group would share lines).
    constexpr int64_t kGroup = 16;
    if (n_tokens >= 2 * kGroup && pool.num_threads() > 1) {
      pool.ParallelFor(
          (n_tokens + kGroup - 1) / kGroup, 1, [&](int64_t b, int64_t e) {
            rk.prepare(w.type, x, x_stride, w.cols, n_tokens, b * kGroup,
                       std::min(n_tokens, e * kGroup), xq);
          });
    } else {
      rk.prepare(w.type, x, x_stride, w.cols, n_tokens, 0, n_tokens, xq);
    }
    args.xq = xq;
  }
  // Threads split the rows in units of tiles_per_split kernel tiles, so
  // that kernels that take several tiles at once (the AVX2 packed mat-vec
  // reads four row groups as four memory streams) keep doing so at range
  // boundaries.
  const int64_t tile = rk.row_tile * rk.tiles_per_split;
  const int64_t n_tiles = (w.rows + tile - 1) / tile;
  // At least ~16 KiB of weights (per token) per range, so that tiny matrices
  // are not split into pieces smaller than the cost of waking a thread.
  const int64_t tile_bytes = std::max<int64_t>(1, w.row_bytes * tile);
  const int64_t grain = std::max<int64_t>(
      1, (16 << 10) / tile_bytes / std::max<int64_t>(1, n_tokens));
  pool.ParallelFor(n_tiles, grain, [&](int64_t b, int64_t e) {
    rk.rows(args, b * tile, std::min(w.rows, e * tile));
  });
}

}  // namespace kernels_internal

void MatMul(const WeightView& w, const float* x, int64_t x_stride,
            int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool) {
  kernels_internal::MatMulWith(kernels_internal::ActiveKernels(), w, x,
                               x_stride, n_tokens, y, y_stride, pool);
}

void MatMulReference(const WeightView& w, const float* x, int64_t x_stride,
                     int64_t n_tokens, float* y, int64_t y_stride) {
  std::vector<float> row(w.cols);
  for (int64_t o = 0; o < w.rows; ++o) {
    DequantizeRow(w.type, w.row(o), row.data(), w.cols);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* xt = x + t * x_stride;
      double acc = 0.0;
      for (int64_t i = 0; i < w.cols; ++i) {
        acc += static_cast<double>(row[i]) * static_cast<double>(xt[i]);
      }
      y[t * y_stride + o] = static_cast<float>(acc);
    }
  }
}

int64_t PackedWeightBytes(const WeightView& w) {
  return kernels_internal::PackedWeightBytesWith(
      kernels_internal::ActiveKernels(), w);
}

WeightView PackWeights(const WeightView& w, void* dst) {
  return kernels_internal::PackWeightsWith(kernels_internal::ActiveKernels(),
                                           w, dst);
}

const char* MatMulIsa() { return kernels_internal::ActiveKernels().name; }

}  // namespace pdserve
