// The model's weights in device memory (one allocation), as the kernel
// library's DeviceMatrix views.
#ifndef PDSERVE_KERNELS_CUDA_PLUGIN_DEVICE_MODEL_H_
#define PDSERVE_KERNELS_CUDA_PLUGIN_DEVICE_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model_weights.h"
#include "kernels/cuda/cuda_kernels.h"

namespace pdserve::cuda_runner {

// One dense decoder layer on the device. Norm vectors are f32.
struct DeviceLayer {
  cuda::DeviceMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
  // wq|wk|wv and w_gate|w_up stored back to back (same type and row bytes),
  // as one matrix each, so one matrix product computes them; data is null
  // when the parts differ in type.
  cuda::DeviceMatrix wqkv, w_gate_up;
  const float *attn_norm = nullptr;
  const float *ffn_norm = nullptr;
  const float *q_norm = nullptr;  // Qwen3 only, [head_dim]
  const float *k_norm = nullptr;
};

// Owns the device copy of a ModelWeights (dense Llama / Qwen3). Matrices keep
// their stored type and row layout (f32 optionally converted to bf16). A tied
// LM head shares the embedding's memory. Not copyable; frees on destruction
// (the device must still be current). Thread-compatible.
class DeviceModel {
 public:
  // Copies every matrix and norm vector of `w` to device `device` (current).
  // RESOURCE_EXHAUSTED names the bytes; UNIMPLEMENTED for MoE / hybrid.
  static absl::StatusOr<std::unique_ptr<DeviceModel>> Upload(
      const ModelWeights &w, bool f32_to_bf16);
  ~DeviceModel();
  DeviceModel(const DeviceModel &) = delete;
  DeviceModel &operator=(const DeviceModel &) = delete;

  cuda::DeviceMatrix embedding, lm_head;
  std::vector<DeviceLayer> layers;
  const float *output_norm = nullptr;
  int64_t device_bytes = 0;      // the allocation
  int64_t layer_bytes = 0;       // per step: all layers + output norm
  int64_t layer_macs = 0;        // multiply-adds per token in all layers
  int64_t lm_head_bytes = 0;     // rows * row_bytes as uploaded
  int64_t max_matrix_elems = 0;  // largest rows * cols (dequant scratch)
  int64_t max_in_features = 0;   // largest cols (GEMM activation scratch)

 private:
  DeviceModel() = default;
  void *arena_ = nullptr;
};

// Bytes of one row of `cols` values of `type` as uploaded (the host's).
int64_t DeviceRowBytes(DType type, int64_t cols, int64_t host_row_bytes);

}  // namespace pdserve::cuda_runner

#endif  // PDSERVE_KERNELS_CUDA_PLUGIN_DEVICE_MODEL_H_
