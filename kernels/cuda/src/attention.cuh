// Internal helpers of the paged-attention kernels (kv_store.cu,
// decode_attention.cu, prefill_attention.cu).
#ifndef PDSERVE_KERNELS_CUDA_SRC_ATTENTION_CUH_
#define PDSERVE_KERNELS_CUDA_SRC_ATTENTION_CUH_

#include "kernels/cuda/src/common.cuh"

namespace pdserve {
namespace cuda {
namespace internal {

// The cache geometry the kernels need, by value.
struct KvGeom {
  float* data;
  int64_t page_stride;   // floats
  int64_t layer_offset;  // floats from a page's start to this layer's keys
  int64_t plane;         // page_size * kv_dim: keys -> values of a page
  int32_t kv_dim;
  int32_t page_size;
  int32_t num_pages;
};

// Batch arrays by value.
struct BatchView {
  const int32_t* q_start;
  const int32_t* start_pos;
  const int32_t* page_start;
  const int32_t* page_table;
  int32_t num_seqs;
};

// Float offset of (position pos of sequence s) key row, slot included, or
// -1 when the page-table entry is missing or out of range.
__device__ __forceinline__ int64_t SlotOffset(const KvGeom& g,
                                              const BatchView& b, int s,
                                              int64_t pos) {
  if (pos < 0 || pos > 0x7fffffff) return -1;
  const int32_t p32 = static_cast<int32_t>(pos);  // 32-bit division
  const int32_t idx = p32 / g.page_size;
  const int32_t slot = p32 - idx * g.page_size;
  const int32_t first = b.page_start[s];
  if (first + static_cast<int64_t>(idx) >= b.page_start[s + 1]) return -1;
  const int32_t page = b.page_table[first + idx];
  if (page < 0 || page >= g.num_pages) return -1;
  return page * g.page_stride + g.layer_offset +
         static_cast<int64_t>(slot) * g.kv_dim;
}

// Validates the host-side descriptors shared by the attention launchers and
// fills the by-value views. `what` names the caller.
cudaError_t MakeViews(const DeviceKvCache& kv, int64_t layer,
                      const AttentionBatch& batch, const char* what, KvGeom* g,
                      BatchView* b);
// Additionally checks the shape against the cache (head_dim 64/128/256,
// heads divisible, kv_dim) and resolves the scale.
cudaError_t CheckShape(const DeviceKvCache& kv, const AttentionShape& shape,
                       const char* what, float* scale);

}  // namespace internal
}  // namespace cuda
}  // namespace pdserve

#endif  // PDSERVE_KERNELS_CUDA_SRC_ATTENTION_CUH_
