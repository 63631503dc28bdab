// The model's weights in device memory (one allocation), as the kernel
// library's DeviceMatrix views.
#ifndef PDSERVE_KERNELS_CUDA_PLUGIN_DEVICE_MODEL_H_
#define PDSERVE_KERNELS_CUDA_PLUGIN_DEVICE_MODEL_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model_weights.h"
#include "kernels/cuda/cuda_kernels.h"

namespace pdserve::cuda_runner {

// `n` rounded up to a multiple of `a` (> 0): device buffer offsets.
inline int64_t AlignUp(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

// One dense decoder layer on the device. Norm vectors are f32.
struct DeviceLayer {
  cuda::DeviceMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
  // wq|wk|wv and w_gate|w_up stored back to back (same type and row bytes),
  // as one matrix each, so one matrix product computes them; data is null
  // when the parts differ in type.
  cuda::DeviceMatrix wqkv, w_gate_up;
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  const float* q_norm = nullptr;  // Qwen3 only, [head_dim]
  const float* k_norm = nullptr;
};

// Owns the device copy of a ModelWeights (dense Llama / Qwen3). Matrices keep
// their stored type and row layout (f32 optionally converted to bf16). A tied
// LM head shares the embedding's memory. Optionally (ConvertQuantizedForGemm)
// also a bf16 copy of each quantized matrix the runner's GEMM path
// multiplies, in a second allocation. Not copyable; frees on destruction
// (the device must still be current). Thread-compatible.
class DeviceModel {
 public:
  // Copies every matrix and norm vector of `w` to device `device` (current).
  // RESOURCE_EXHAUSTED names the bytes; UNIMPLEMENTED for MoE / hybrid.
  static absl::StatusOr<std::unique_ptr<DeviceModel>> Upload(
      const ModelWeights& w, bool f32_to_bf16);
  ~DeviceModel();

  // Bytes of the bf16 copies ConvertQuantizedForGemm makes (0 when no matrix
  // is quantized): of wqkv and w_gate_up where they are fused (else their
  // parts), wo, w_down and the LM head, each rows x cols x 2.
  int64_t QuantizedGemmCopyBytes() const;
  // Allocates and fills those copies on `stream` (cuda::DequantizeToHalf:
  // each value f16 scale x int, rounded once to bf16, exactly what a
  // per-product dequantization gives). RESOURCE_EXHAUSTED names the bytes.
  // Once; a second call is a no-op.
  absl::Status ConvertQuantizedForGemm(cudaStream_t stream);
  // The bf16 copy of `w` (the matrix itself or a leading block of rows of a
  // fused one: same data pointer, cols, and no more rows); data null when
  // there is none.
  cuda::DeviceMatrix GemmCopy(const cuda::DeviceMatrix& w) const;

  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  cuda::DeviceMatrix embedding, lm_head;
  std::vector<DeviceLayer> layers;
  const float* output_norm = nullptr;
  int64_t device_bytes = 0;  // the allocation
  int64_t layer_bytes = 0;   // per step: all layers + output norm
  int64_t layer_macs = 0;    // multiply-adds per token in all layers
  // The quantized matrices' share of layer_bytes and their weights (a GEMM
  // step reads them as bf16: 2 bytes a weight).
  int64_t layer_quantized_bytes = 0;
  int64_t layer_quantized_elems = 0;
  int64_t lm_head_bytes = 0;     // rows * row_bytes as uploaded
  int64_t max_matrix_elems = 0;  // largest rows * cols (dequant scratch)
  int64_t max_in_features = 0;   // largest cols (GEMM activation scratch)

 private:
  DeviceModel() = default;
  // The matrices QuantizedGemmCopyBytes counts.
  std::vector<const cuda::DeviceMatrix*> QuantizedGemmMatrices() const;

  void* arena_ = nullptr;
  void* gemm_arena_ = nullptr;
  // bf16 copies by the packed matrix's data pointer.
  std::unordered_map<const void*, cuda::DeviceMatrix> gemm_copies_;
};

// Bytes of one row of `cols` values of `type` as uploaded (the host's).
int64_t DeviceRowBytes(DType type, int64_t cols, int64_t host_row_bytes);

}  // namespace pdserve::cuda_runner

#endif  // PDSERVE_KERNELS_CUDA_PLUGIN_DEVICE_MODEL_H_
