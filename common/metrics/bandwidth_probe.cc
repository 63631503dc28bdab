#include "common/metrics/bandwidth_probe.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pdserve::metrics {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Copies `bytes` from src to dst split over `threads` threads; returns the
// wall time in seconds.
double TimedCopy(const char* src, char* dst, int64_t bytes, int threads) {
  const int64_t slice = (bytes / threads + 63) / 64 * 64;
  const auto start = std::chrono::steady_clock::now();
  if (threads == 1) {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
  } else {
    std::vector<std::thread> workers;
    workers.reserve(static_cast<size_t>(threads));
    for (int t = 0; t < threads; ++t) {
      const int64_t begin = std::min(bytes, t * slice);
      const int64_t end = std::min(bytes, begin + slice);
      workers.emplace_back([=] {
        std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin));
      });
    }
    for (std::thread& w : workers) w.join();
  }
  const auto stop = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(stop - start).count();
}

}  // namespace

int64_t CopyProbeBufferBytes(int64_t llc_bytes) {
  const int64_t wanted = llc_bytes > 0 ? 2 * llc_bytes : 0;
  return std::clamp<int64_t>(wanted, 64 * kMiB, 256 * kMiB);
}

int64_t LastLevelCacheBytes() {
  for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long v = sysconf(name);
    if (v > 0) return static_cast<int64_t>(v);
  }
  return 0;
}

absl::StatusOr<CopyProbeResult> MeasureHostCopyBandwidth(
    const CopyProbeOptions& options) {
  if (options.reps < 1 || options.threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("copy probe needs reps >= 1 and threads >= 1, got reps ",
                     options.reps, " threads ", options.threads));
  }
  const int64_t bytes = options.buffer_bytes > 0
                            ? options.buffer_bytes
                            : CopyProbeBufferBytes(LastLevelCacheBytes());
  if (bytes < kMiB) {
    return absl::InvalidArgumentError(absl::StrCat(
        "copy probe buffer is ", bytes, " bytes, must be >= ", kMiB));
  }
  std::unique_ptr<char[]> src(new (std::nothrow) char[bytes]);
  std::unique_ptr<char[]> dst(new (std::nothrow) char[bytes]);
  if (src == nullptr || dst == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "copy probe cannot allocate 2 buffers of ", bytes, " bytes"));
  }
  std::memset(src.get(), 0x5a, static_cast<size_t>(bytes));
  std::memset(dst.get(), 0, static_cast<size_t>(bytes));
  TimedCopy(src.get(), dst.get(), bytes, options.threads);  // warm-up
  double best = 0.0;
  for (int i = 0; i < options.reps; ++i) {
    const double t = TimedCopy(src.get(), dst.get(), bytes, options.threads);
    if (i == 0 || t < best) best = t;
  }
  if (dst[bytes - 1] != 0x5a) {
    return absl::InternalError("copy probe: destination was not written");
  }
  CopyProbeResult result;
  result.buffer_bytes = bytes;
  result.reps = options.reps;
  result.threads = options.threads;
  result.best_seconds = best;
  result.bytes_per_second =
      best > 0.0 ? 2.0 * static_cast<double>(bytes) / best : 0.0;
  return result;
}

}  // namespace pdserve::metrics
