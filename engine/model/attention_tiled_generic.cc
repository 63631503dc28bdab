// The tiled attention kernels compiled for the generic level (flags in
// CMakeLists.txt); the code is attention_tiled_impl.h.
#define PDSERVE_ATTN_NS attn_generic
#include "engine/model/attention_tiled_impl.h"

namespace pdserve::attn_internal {
TiledKernels GenericKernels() { return {&attn_generic::Attend, "generic"}; }
}  // namespace pdserve::attn_internal
