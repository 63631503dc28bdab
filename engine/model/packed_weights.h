// Weight matrices repacked once, when a CPU forward pass is built, into the
// layout the active SIMD level's MatMul kernels stream best (PackWeights in
// kernels/matmul.h: on AVX2, rows interleaved in groups of 8; on AVX-512,
// groups of 16 with quantized blocks in VNNI order).
#ifndef PDSERVE_ENGINE_MODEL_PACKED_WEIGHTS_H_
#define PDSERVE_ENGINE_MODEL_PACKED_WEIGHTS_H_

#include <cstdint>
#include <memory>

#include "engine/model_weights.h"
#include "kernels/thread_pool.h"

namespace pdserve {

// A copy of `src` whose matrices (every layer's projections, experts, the
// LM head and the vision tower's; not the token embedding, which is read by
// rows) carry packed
// copies for the active kernels. The packed copies live in one anonymous
// mapping (transparent huge pages requested) owned through the result's
// `storage`, which also shares `src`'s storage, so the result stays valid on
// its own. Packing runs on `pool`'s threads. Afterwards the pages of the
// row-major originals that were read only to be packed are offered back to
// the OS (MADV_PAGEOUT: file pages leave the resident set, nothing is lost).
//
// With nothing to pack (a SIMD level that reads row-major weights, F32
// models), when PDSERVE_PACK=0 is set in the environment, or when the
// mapping fails, the result is a plain copy of src's views and
// `packed_bytes` is 0: MatMul then reads the original layout, with the same
// results up to the kernels' own rounding.
struct PackedModel {
  ModelWeights weights;
  int64_t packed_bytes = 0;  // bytes of packed copies
};
std::unique_ptr<const PackedModel> PackModelForCpu(const ModelWeights& src,
                                                    ThreadPool& pool);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_MODEL_PACKED_WEIGHTS_H_
