// Device kernels the runner needs beyond kernels/cuda/cuda_kernels.h
// (launchers only enqueue on `stream`; graph-capturable; no allocation).
// The KV cache may be f32 or bf16 (DeviceKvCache::type): keys and values are
// rounded to nearest even when stored in a bf16 cache (as cuda::StoreKv) and
// read back as f32; the math is f32 either way.
#ifndef PDSERVE_KERNELS_CUDA_PLUGIN_PLUGIN_KERNELS_H_
#define PDSERVE_KERNELS_CUDA_PLUGIN_PLUGIN_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"

namespace pdserve::cuda_runner {

// dst[i][0, cols) = src[index[i]][0, cols), i < rows; src rows src_stride
// floats apart, dst rows dst_stride apart. index is a device array; an index
// outside [0, src_rows) gives a row of zeros.
cudaError_t GatherRows(const float* src, int64_t src_stride, int64_t src_rows,
                       const int32_t* index, int64_t rows, int64_t cols,
                       float* dst, int64_t dst_stride, cudaStream_t stream);

// Causal grouped-query attention for ANY head_dim (1..512; the kernel
// library's attention takes 64, 128 or 256): same contract as
// cuda::PrefillAttention (rows of batch.total_rows, each attending over its
// sequence's positions [0, position]), f32 with an online softmax, one block
// per (row, kv head). Slow for long prompts; meant for small models.
cudaError_t FallbackAttention(const cuda::DeviceKvCache& kv, int64_t layer,
                              const cuda::AttentionBatch& batch,
                              const cuda::AttentionShape& shape, const float* q,
                              int64_t q_stride, float* out, int64_t out_stride,
                              cudaStream_t stream);

// Dynamic shared memory FallbackAttention needs for `shape` (bytes).
int64_t FallbackAttentionSmemBytes(const cuda::AttentionShape& shape);

// Raises the kernel's dynamic shared memory limit to `bytes` (call once
// outside graph capture before launches that need more than 48 KiB).
cudaError_t PrepareFallbackAttention(int64_t bytes);

// One launch for the attention inputs of `layer`: for each row r <
// batch.total_rows of qkv ([rows][stride] floats: q heads, then k heads,
// then v heads, head_dim each), in place:
//   - per-head RMSNorm of q and k heads when q_norm / k_norm are non-null
//     (Qwen3; weight[head_dim], 1/sqrt(mean(x^2) + eps), f32),
//   - RoPE on the first 2 * half dims of every q and k head with the row's
//     tables cos/sin [rows][half] (cuda::RopeCosSin) and the arithmetic of
//     cuda::ApplyRope (no FMA contraction),
//   - the row's key and value stored into its KV page slot, exactly as
//     cuda::StoreKv (a missing or out-of-range page entry: not stored).
// Replaces HeadRmsNorm x2 + ApplyRope x2 + StoreKv. head_dim <= 512.
struct QkvPrep {
  float* qkv = nullptr;
  int64_t stride = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t half = 0;  // rotated pairs per head
  bool neox = true;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float eps = 0.0f;
  const float* cos = nullptr;
  const float* sin = nullptr;
};
cudaError_t QkNormRopeStore(const QkvPrep& prep, const cuda::DeviceKvCache& kv,
                            int64_t layer, const cuda::AttentionBatch& batch,
                            cudaStream_t stream);

}  // namespace pdserve::cuda_runner

#endif  // PDSERVE_KERNELS_CUDA_PLUGIN_PLUGIN_KERNELS_H_
