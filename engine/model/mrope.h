// Multimodal RoPE (Qwen3.5 interleaved mRoPE) angles for one token.
#ifndef PDSERVE_ENGINE_MODEL_MROPE_H_
#define PDSERVE_ENGINE_MODEL_MROPE_H_

#include <cstdint>

#include "absl/types/span.h"

namespace pdserve {

// Which position (0 = t, 1 = h, 2 = w) drives rotary frequency i of `half`
// under Qwen3.5's interleaved layout (transformers'
// recomposition_frequencies): i % 3 == 1 and i < 3 * sections[1] -> h;
// i % 3 == 2 and i < 3 * sections[2] -> w; otherwise t. Empty sections: t.
int MropeAxis(int64_t i, absl::Span<const int64_t> sections);

// cos/sin[i] of angle pos[MropeAxis(i)] * inv_freq[i], i < half. For text
// tokens all three positions are equal and this is plain RoPE, bit for bit.
void MropeCosSin(const int64_t pos[3], absl::Span<const int64_t> sections,
                 const float* inv_freq, int64_t half, float* cos, float* sin);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_MODEL_MROPE_H_
