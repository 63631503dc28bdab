#include "common/metrics/buckets.h"

#include <cmath>

namespace pdserve::metrics {
namespace {

// The 1-2.5-5 series from 10^lo_exp up to and including 10^hi_exp. Each
// bound is computed from its exponent so labels print exactly ("0.001").
std::vector<double> OneTwoFive(int lo_exp, int hi_exp) {
  std::vector<double> out;
  for (int e = lo_exp; e <= hi_exp; ++e) {
    const double decade = std::pow(10.0, e);
    out.push_back(decade);
    if (e < hi_exp) {
      out.push_back(2.5 * decade);
      out.push_back(5.0 * decade);
    }
  }
  return out;
}

}  // namespace

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> out;
  if (!(start > 0.0) || !(factor > 1.0) || count < 1) return out;
  out.reserve(static_cast<size_t>(count));
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) out.push_back(v);
  return out;
}

std::vector<double> RequestLatencyBuckets() {
  std::vector<double> out = OneTwoFive(-3, 2);
  out.push_back(120.0);
  return out;
}

std::vector<double> TokenLatencyBuckets() {
  std::vector<double> out = {0.001,  0.002, 0.003, 0.004, 0.005,
                             0.0075, 0.010, 0.015, 0.020, 0.025,
                             0.030,  0.040, 0.050, 0.075, 0.100};
  for (double v : OneTwoFive(-1, 1)) {
    if (v > 0.1) out.push_back(v);
  }
  return out;
}

std::vector<double> StepDurationBuckets() {
  std::vector<double> out = OneTwoFive(-4, 1);
  out.push_back(30.0);
  out.push_back(60.0);
  return out;
}

std::vector<double> TokenizerBuckets() { return OneTwoFive(-5, 0); }

std::vector<double> BatchSizeBuckets() {
  return ExponentialBuckets(1.0, 2.0, 11);
}

std::vector<double> BandwidthBuckets() {
  return ExponentialBuckets(1e8, 2.0, 18);
}

}  // namespace pdserve::metrics
