// The tiled attention kernels compiled for the avx512 level (flags in
// CMakeLists.txt); the code is attention_tiled_impl.h.
#define PDSERVE_ATTN_NS attn_avx512
#include "engine/model/attention_tiled_impl.h"

namespace pdserve::attn_internal {
TiledKernels Avx512Kernels() { return {&attn_avx512::Attend, "avx512"}; }
}  // namespace pdserve::attn_internal
