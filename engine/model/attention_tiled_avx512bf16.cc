// The tiled attention kernels compiled for AVX-512 with AVX512-BF16
// (vdpbf16ps for the bf16 cache; flags in CMakeLists.txt); the code is
// attention_tiled_impl.h.
#define PDSERVE_ATTN_NS attn_avx512bf16
#include "engine/model/attention_tiled_impl.h"

namespace pdserve::attn_internal {
TiledKernels Avx512Bf16Kernels() {
  return {&attn_avx512bf16::Attend, "avx512bf16"};
}
}  // namespace pdserve::attn_internal
