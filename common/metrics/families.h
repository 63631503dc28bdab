// Internal helpers of common/metrics: build Prometheus families from the
// MetricSpec table, so names and HELP texts live in one place.
#ifndef PDSERVE_COMMON_METRICS_FAMILIES_H_
#define PDSERVE_COMMON_METRICS_FAMILIES_H_

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "common/metrics/metric_names.h"

namespace pdserve::metrics::internal {

// Each requires spec.type to match (checked with assert in debug builds).
prometheus::Family<prometheus::Counter>& CounterFamily(
    prometheus::Registry& registry, const MetricSpec& spec);
prometheus::Family<prometheus::Gauge>& GaugeFamily(
    prometheus::Registry& registry, const MetricSpec& spec);
prometheus::Family<prometheus::Histogram>& HistogramFamily(
    prometheus::Registry& registry, const MetricSpec& spec);

// Adds `delta` to a counter when it is positive (counters never go down).
void AddPositive(prometheus::Counter& counter, double delta);

}  // namespace pdserve::metrics::internal

#endif  // PDSERVE_COMMON_METRICS_FAMILIES_H_
