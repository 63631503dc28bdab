// The tiled attention kernels compiled for the avx2 level (flags in
// CMakeLists.txt); the code is attention_tiled_impl.h.
#define PDSERVE_ATTN_NS attn_avx2
#include "engine/model/attention_tiled_impl.h"

namespace pdserve::attn_internal {
TiledKernels Avx2Kernels() { return {&attn_avx2::Attend, "avx2"}; }
}  // namespace pdserve::attn_internal
