// Counter-based random numbers for sampling: Philox4x32-10 (Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11; the generator of
// Random123 and cuRAND's curand_philox4x32_10). A draw is a pure function of
// (key, counter), so the randomness of a sampled token depends only on
// (seed, position) and a request resumed at position k draws exactly what it
// would have drawn without the interruption.
#ifndef PDSERVE_ENGINE_MODEL_COUNTER_RNG_H_
#define PDSERVE_ENGINE_MODEL_COUNTER_RNG_H_

#include <array>
#include <cstdint>

namespace pdserve {

// Philox4x32 with 10 rounds: the block cipher that maps a 128-bit counter
// under a 64-bit key to 128 random bits. Matches Random123's published
// known-answer vectors (tests/engine/model_counter_rng_test.cc). Pure.
std::array<uint32_t, 4> Philox4x32_10(std::array<uint32_t, 4> counter,
                                      std::array<uint32_t, 2> key);

// The uniform double in [0, 1) (53 random bits) for the token sampled at
// `position` (tokens of the sequence before it: prompt + generated) of a
// sequence drawing with `seed`: Philox4x32-10 with key = seed (low word
// first) and counter = (position low, position high, 0, 0); the first two
// output words give 27 + 26 bits. The CUDA sampler (kernels/cuda/src/
// sampling.cu) draws the same number for the same (seed, position).
double SamplingUniform(uint64_t seed, uint64_t position);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_MODEL_COUNTER_RNG_H_
