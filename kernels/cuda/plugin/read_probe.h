// The device memory read-bandwidth probe: the peak a CUDA engine's
// bandwidth utilisation is measured against (issue 18), instead of a host
// memory probe. Host code; uses the current device.
#ifndef PDSERVE_KERNELS_CUDA_PLUGIN_READ_PROBE_H_
#define PDSERVE_KERNELS_CUDA_PLUGIN_READ_PROBE_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace pdserve::cuda_runner {

struct ReadProbeOptions {
  // Bytes swept per read; 0 = DefaultReadProbeBytes() of the device.
  // Rounded down to a multiple of 16 (at least 16).
  int64_t buffer_bytes = 0;
  // Timed sweeps after one untimed warm-up; the fastest is reported.
  int timed_sweeps = 5;
};

struct ReadProbeResult {
  double bytes_per_second = 0.0;  // buffer_bytes / the fastest sweep
  int64_t buffer_bytes = 0;       // bytes one sweep read
  double best_ms = 0.0;           // the fastest sweep (CUDA events)
  int sweeps = 0;                 // sweeps run, warm-up included
};

// Sweep size that defeats the L2 cache: 8 x L2 (cudaDevAttrL2CacheSize), at
// least 256 MiB, at most a quarter of the free device memory.
int64_t DefaultReadProbeBytes();

// Allocates the buffer, fills it, runs cuda::ReadSweep warm-up + timed
// sweeps on a stream of its own, timed with CUDA events, and frees it.
// Checks that every sweep read the whole buffer (the word sums). Errors:
// INVALID_ARGUMENT for timed_sweeps < 1; RESOURCE_EXHAUSTED when the buffer
// cannot be allocated; INTERNAL for a CUDA error or a wrong sum.
absl::StatusOr<ReadProbeResult> MeasureDeviceReadBandwidth(
    const ReadProbeOptions& options);

}  // namespace pdserve::cuda_runner

#endif  // PDSERVE_KERNELS_CUDA_PLUGIN_READ_PROBE_H_
