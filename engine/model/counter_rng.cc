#include "engine/model/counter_rng.h"

namespace pdserve {
namespace {

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1
constexpr int kPhiloxRounds = 10;

}  // namespace

std::array<uint32_t, 4> Philox4x32_10(std::array<uint32_t, 4> c,
                                      std::array<uint32_t, 2> key) {
  for (int round = 0; round < kPhiloxRounds; ++round) {
    const uint64_t p0 = uint64_t{kPhiloxM0} * c[0];
    const uint64_t p1 = uint64_t{kPhiloxM1} * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32);
    const uint32_t lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32);
    const uint32_t lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ key[0], lo1, hi0 ^ c[3] ^ key[1], lo0};
    key[0] += kPhiloxW0;
    key[1] += kPhiloxW1;
  }
  return c;
}

double SamplingUniform(uint64_t seed, uint64_t position) {
  const std::array<uint32_t, 4> bits = Philox4x32_10(
      {static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32),
       0u, 0u},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return (static_cast<double>(bits[0] >> 5) * 67108864.0 +
          static_cast<double>(bits[1] >> 6)) *
         (1.0 / 9007199254740992.0);
}

}  // namespace pdserve
