// Histogram bucket boundaries for pdserve's metrics (pure, no Prometheus
// dependency). Upper bounds are inclusive, strictly increasing; Prometheus
// adds the +Inf bucket itself.
#ifndef PDSERVE_COMMON_METRICS_BUCKETS_H_
#define PDSERVE_COMMON_METRICS_BUCKETS_H_

#include <vector>

namespace pdserve::metrics {

// `count` bounds start, start*factor, start*factor^2, ... Requires start > 0,
// factor > 1, count >= 1 (otherwise returns an empty vector).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// Request latencies (TTFT, end-to-end, queue, prefill, decode): 1 ms .. 120 s
// in a 1-2.5-5 series.
std::vector<double> RequestLatencyBuckets();

// Inter-token latency and write stalls: 1 ms .. 10 s in a 1-2.5-5 series,
// finer below 100 ms where decode steps live.
std::vector<double> TokenLatencyBuckets();

// Engine step durations: 100 us .. 60 s.
std::vector<double> StepDurationBuckets();

// Tokenizer time per request: 10 us .. 1 s.
std::vector<double> TokenizerBuckets();

// Batch sizes: 1, 2, 4, ... 1024 sequences.
std::vector<double> BatchSizeBuckets();

// Memory bandwidth, bytes/s: 100 MB/s doubling up to ~13 TB/s (covers a
// laptop core through an HBM3e GPU).
std::vector<double> BandwidthBuckets();

}  // namespace pdserve::metrics

#endif  // PDSERVE_COMMON_METRICS_BUCKETS_H_
