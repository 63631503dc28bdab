// Nearest-rank percentile for the benchmark harnesses. Header-only, pure.
#ifndef PDSERVE_BENCH_PERCENTILE_H_
#define PDSERVE_BENCH_PERCENTILE_H_

#include <algorithm>
#include <cstddef>
#include <vector>

namespace pdserve::bench {

// The q-quantile (q in [0, 1]) of `v` by nearest rank; 0 for an empty `v`.
inline double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(q * v.size() + 0.999999);
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_PERCENTILE_H_
