// Device kernels the runner needs beyond kernels/cuda/cuda_kernels.h
// (launchers only enqueue on `stream`; graph-capturable; no allocation).
#ifndef PDSERVE_KERNELS_CUDA_PLUGIN_PLUGIN_KERNELS_H_
#define PDSERVE_KERNELS_CUDA_PLUGIN_PLUGIN_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"

namespace pdserve::cuda_runner {

// dst[i][0, cols) = src[index[i]][0, cols), i < rows; src rows src_stride
// floats apart, dst rows dst_stride apart. index is a device array; an index
// outside [0, src_rows) gives a row of zeros.
cudaError_t GatherRows(const float *src, int64_t src_stride, int64_t src_rows,
                       const int32_t *index, int64_t rows, int64_t cols,
                       float *dst, int64_t dst_stride, cudaStream_t stream);

// Causal grouped-query attention for ANY head_dim (1..512; the kernel
// library's attention takes 64, 128 or 256): same contract as
// cuda::PrefillAttention (rows of batch.total_rows, each attending over its
// sequence's positions [0, position]), f32 with an online softmax, one block
// per (row, kv head). Slow for long prompts; meant for small models.
cudaError_t FallbackAttention(const cuda::DeviceKvCache &kv, int64_t layer,
                              const cuda::AttentionBatch &batch,
                              const cuda::AttentionShape &shape, const float *q,
                              int64_t q_stride, float *out, int64_t out_stride,
                              cudaStream_t stream);

// Dynamic shared memory FallbackAttention needs for `shape` (bytes).
int64_t FallbackAttentionSmemBytes(const cuda::AttentionShape &shape);

// Raises the kernel's dynamic shared memory limit to `bytes` (call once
// outside graph capture before launches that need more than 48 KiB).
cudaError_t PrepareFallbackAttention(int64_t bytes);

}  // namespace pdserve::cuda_runner

#endif  // PDSERVE_KERNELS_CUDA_PLUGIN_PLUGIN_KERNELS_H_
