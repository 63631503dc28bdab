// Random weights for the benchmarks' synthetic models: matrices of any
// DType with N(0, 1/cols) entries (quantized as the kernels store them),
// vectors of N(base, spread) floats. The memory is kept in the model's
// ModelWeights::storage. Not thread-safe (one generator).
#ifndef PDSERVE_BENCH_RANDOM_WEIGHTS_H_
#define PDSERVE_BENCH_RANDOM_WEIGHTS_H_

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "engine/model_weights.h"
#include "kernels/dtype.h"

namespace pdserve::bench {

struct RandomWeights {
  ModelWeights& w;
  std::mt19937_64 rng{7};
  int64_t bytes = 0;  // of all matrices built

  WeightView Matrix(int64_t rows, int64_t cols, DType type) {
    std::normal_distribution<float> d(0.0f, 1.0f / std::sqrt(float(cols)));
    const int64_t rb = *RowBytes(type, cols);
    auto buf = std::make_shared<std::vector<uint64_t>>((rows * rb + 7) / 8);
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (float& x : row) x = d(rng);
      QuantizeRow(type, row.data(),
                  reinterpret_cast<uint8_t*>(buf->data()) + r * rb, cols);
    }
    w.storage.push_back(buf);
    bytes += rows * rb;
    return WeightView{type, rows, cols, rb, buf->data()};
  }
  // n floats of N(base, spread) (spread 0: all equal to base).
  const float* Vector(int64_t n, float base, float spread) {
    auto v = std::make_shared<std::vector<float>>(n, base);
    if (spread > 0) {
      std::normal_distribution<float> d(base, spread);
      for (float& x : *v) x = d(rng);
    }
    w.storage.push_back(v);
    return v->data();
  }
  const float* Ones(int64_t n) { return Vector(n, 1.0f, 0.0f); }
};

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_RANDOM_WEIGHTS_H_
