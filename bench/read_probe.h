// Streaming read bandwidth of this machine, the physical limit a decode step
// is held to (weights + KV bytes read per token x tokens/s / this). Shared by
// moe_bench and peak_bench (bench/cpu_compare.py's probe).
#ifndef PDSERVE_BENCH_READ_PROBE_H_
#define PDSERVE_BENCH_READ_PROBE_H_

#include <cstdint>

#include "kernels/thread_pool.h"

namespace pdserve::bench {

// Sums n floats with the widest loads the CPU has (AVX-512F: 8 accumulators,
// else AVX2: 4, else SSE: 4; a plain loop elsewhere). The value is only a sink.
float SumFloats(const float* a, int64_t n);

// GB/s (1e9 bytes/s): the fastest of 2 x `passes` reads of a `bytes`
// buffer, each of the pool's threads summing its own contiguous slice (which
// it also first-touched), alternately as one stream and (AVX-512) as four
// concurrent streams (its quarters). Allocates the buffer for the call, on
// transparent huge pages where available (like the engine's weights). Not
// thread-safe (uses the pool).
double StreamReadGbPerS(int64_t bytes, ThreadPool& pool, int passes = 8);

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_READ_PROBE_H_
