#include "common/metrics/families.h"

#include <cassert>

namespace pdserve::metrics::internal {

prometheus::Family<prometheus::Counter>& CounterFamily(
    prometheus::Registry& registry, const MetricSpec& spec) {
  assert(spec.type == MetricType::kCounter);
  return prometheus::BuildCounter().Name(spec.name).Help(spec.help).Register(
      registry);
}

prometheus::Family<prometheus::Gauge>& GaugeFamily(
    prometheus::Registry& registry, const MetricSpec& spec) {
  assert(spec.type == MetricType::kGauge);
  return prometheus::BuildGauge().Name(spec.name).Help(spec.help).Register(
      registry);
}

prometheus::Family<prometheus::Histogram>& HistogramFamily(
    prometheus::Registry& registry, const MetricSpec& spec) {
  assert(spec.type == MetricType::kHistogram);
  return prometheus::BuildHistogram().Name(spec.name).Help(spec.help).Register(
      registry);
}

void AddPositive(prometheus::Counter& counter, double delta) {
  if (delta > 0.0) counter.Increment(delta);
}

}  // namespace pdserve::metrics::internal
