// A short host-memory copy probe that measures the achievable memory
// bandwidth at start, for the engine's bandwidth-utilisation ratio when no
// peak is configured. CPU engines only: a GPU engine configures its peak or
// probes with a device-to-device copy in its own backend.
#ifndef PDSERVE_COMMON_METRICS_BANDWIDTH_PROBE_H_
#define PDSERVE_COMMON_METRICS_BANDWIDTH_PROBE_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace pdserve::metrics {

struct CopyProbeOptions {
  // Bytes per buffer (two are allocated); 0 = CopyProbeBufferBytes(LLC).
  int64_t buffer_bytes = 0;
  // Timed copies; the best (fastest) one is reported.
  int reps = 3;
  // Threads copying disjoint slices at once (the engine's thread count).
  int threads = 1;
};

struct CopyProbeResult {
  // Bytes read + bytes written by the best copy / its duration.
  double bytes_per_second = 0.0;
  int64_t buffer_bytes = 0;
  int reps = 0;
  int threads = 0;
  double best_seconds = 0.0;
};

// Buffer size for a probe that must miss the last-level cache: 2x the LLC
// size, at least 64 MiB, at most 256 MiB (a start-up probe must stay short:
// 3 copies of 256 MiB take ~0.3 s at 5 GB/s). The cap still exceeds what one
// core can cache: servers report the LLC of the whole socket (e.g. 260 MiB
// over 8 core complexes of 32 MiB). `llc_bytes` <= 0 means unknown.
int64_t CopyProbeBufferBytes(int64_t llc_bytes);

// The last-level cache size of this machine in bytes, 0 when unknown.
int64_t LastLevelCacheBytes();

// Copies one buffer into another `reps` times with memcpy (after one
// untimed warm-up copy that also faults every page in) and reports the best
// rate, counting each byte once read and once written. INVALID_ARGUMENT for
// reps < 1, threads < 1 or a buffer under 1 MiB; RESOURCE_EXHAUSTED when the
// buffers cannot be allocated.
absl::StatusOr<CopyProbeResult> MeasureHostCopyBandwidth(
    const CopyProbeOptions& options);

}  // namespace pdserve::metrics

#endif  // PDSERVE_COMMON_METRICS_BANDWIDTH_PROBE_H_
