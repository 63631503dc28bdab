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
  void* data;            // float or bf16 elements
  int64_t page_stride;   // elements
  int64_t layer_offset;  // elements from a page's start to this layer's keys
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

// Loads and stores of KV elements (T = float, or uint16_t holding bf16
// bits), converted to/from f32. Offsets are in elements.
template <typename T>
struct KvIo;
template <>
struct KvIo<float> {
  static constexpr int kChunk = 4;  // elements per 16-byte load
  __device__ static float Load(const void* base, int64_t off) {
    return static_cast<const float*>(base)[off];
  }
  // dst: kChunk floats (scalar writes, so register arrays stay registers).
  __device__ static void LoadChunk(const void* base, int64_t off, float* dst) {
    const float4 v = __ldg(
        reinterpret_cast<const float4*>(static_cast<const float*>(base) + off));
    dst[0] = v.x;
    dst[1] = v.y;
    dst[2] = v.z;
    dst[3] = v.w;
  }
  __device__ static void Store(void* base, int64_t off, float v) {
    static_cast<float*>(base)[off] = v;
  }
};
template <>
struct KvIo<uint16_t> {
  static constexpr int kChunk = 8;
  __device__ static float Load(const void* base, int64_t off) {
    return __uint_as_float(
        static_cast<uint32_t>(static_cast<const uint16_t*>(base)[off]) << 16);
  }
  __device__ static void LoadChunk(const void* base, int64_t off, float* dst) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(
        static_cast<const uint16_t*>(base) + off));
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      dst[2 * i] = __uint_as_float(w[i] << 16);
      dst[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
  __device__ static void Store(void* base, int64_t off, float v) {
    static_cast<uint16_t*>(base)[off] =
        __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
};

// Element offset of (position pos of sequence s) key row, slot included, or
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
