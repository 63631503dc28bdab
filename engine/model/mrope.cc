#include "engine/model/mrope.h"

#include <cmath>

namespace pdserve {

int MropeAxis(int64_t i, absl::Span<const int64_t> sections) {
  if (sections.size() < 3) return 0;
  if (i % 3 == 1 && i < 3 * sections[1]) return 1;
  if (i % 3 == 2 && i < 3 * sections[2]) return 2;
  return 0;
}

void MropeCosSin(const int64_t pos[3], absl::Span<const int64_t> sections,
                 const float* inv_freq, int64_t half, float* cos, float* sin) {
  for (int64_t i = 0; i < half; ++i) {
    const float p = static_cast<float>(pos[MropeAxis(i, sections)]);
    const float angle = p * inv_freq[i];
    cos[i] = std::cos(angle);
    sin[i] = std::sin(angle);
  }
}

}  // namespace pdserve
