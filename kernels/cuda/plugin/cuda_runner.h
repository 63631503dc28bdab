// The CUDA model runner: a ForwardBackend that keeps the whole model (weights,
// paged KV cache) in device memory and runs each step on one CUDA device.
// Built into the plugin libpdserve_cuda.so (plugin_entry.cc) and linked
// directly by the gpu tests and benchmarks (static library
// pdserve_cuda_runner).
#ifndef PDSERVE_KERNELS_CUDA_PLUGIN_CUDA_RUNNER_H_
#define PDSERVE_KERNELS_CUDA_PLUGIN_CUDA_RUNNER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/forward_backend.h"
#include "engine/kv/kv_pool.h"
#include "engine/model_weights.h"

namespace pdserve::cuda_runner {

// Knobs of the runner. The plugin reads them from the environment
// (FromEnvironment); tests and benches set them directly.
struct RunnerOptions {
  int32_t device_index = 0;
  // Upload f32 weight matrices as bf16 (halves memory and bytes per step).
  // Norm vectors stay f32; f16/bf16/Q8_0/Q4_0/Q4_1 are uploaded as stored.
  bool f32_to_bf16 = false;
  // Steps with at most this many tokens use the matrix-vector kernels (in
  // chunks of cuda::kMaxMatVecTokens, f32 activations, weights read once
  // per chunk); larger steps use cuBLAS GEMM (half weights: activations
  // converted to the weight type; quantized weights: dequantized to bf16
  // per matrix first). Default: the MatVec kernel's limit, 8.
  int64_t matvec_max_tokens = 8;
  // Steps of at least this many token rows that are not all decode rows
  // compute attention with cuda::FlashPrefillAttention (bf16 tensor cores,
  // online softmax over key tiles: no score matrix in memory, any context);
  // smaller ones use the f32 kernels (exact to ~1e-6). 0 = never.
  int64_t flash_attention_min_rows = 128;
  // How the GEMM path (steps of more rows than the MatVec limit, 32 for
  // quantized weights) multiplies Q8_0 / Q4_0 / Q4_1 matrices. The packed
  // matrices always stay for MatVec (decode reads 4.5-8.5 bits a weight).
  enum class QuantizedGemm {
    // kBf16 when the copies fit in the device memory left after everything
    // else (keeping kQuantizedCopyReserveBytes free), else kPerStep.
    kAuto,
    // A bf16 copy of every such matrix, converted once at creation (2 bytes
    // a weight more); RESOURCE_EXHAUSTED at creation when they do not fit.
    kBf16,
    // Each matrix dequantized into a scratch buffer before every GEMM.
    kPerStep,
  };
  QuantizedGemm quantized_gemm = QuantizedGemm::kAuto;
  // Capture decode steps (every span one token) as CUDA graphs per
  // (batch bucket, KV-length bucket) and replay them.
  bool use_graphs = true;
  // Largest decode batch captured as a graph (buckets 1, 2, 4, ... up to
  // this, padded); larger decode batches run eagerly.
  int64_t max_graph_batch = 256;
  // Record a CUDA event pair around each step's device work (benchmarks:
  // the device's idle time between steps; CudaRunner::TakeStepTimings).
  bool step_timing = false;

  // PDSERVE_CUDA_BF16=1, PDSERVE_CUDA_GRAPHS=0, PDSERVE_CUDA_MATVEC_TOKENS=N,
  // PDSERVE_CUDA_GRAPH_BATCH=N, PDSERVE_CUDA_FLASH_ROWS=N,
  // PDSERVE_CUDA_QUANT_GEMM=auto|bf16|per_step override the defaults.
  static RunnerOptions FromEnvironment(int32_t device_index);
};

// What the device is ("NVIDIA H200", sm_90, memory); FAILED_PRECONDITION
// with the driver's text when there is no driver or no such device.
struct DeviceDescription {
  std::string name;
  int32_t major = 0, minor = 0;
  int64_t free_bytes = 0, total_bytes = 0;
};
absl::StatusOr<DeviceDescription> QueryDevice(int32_t device_index);

// Device memory kAuto leaves free after the quantized matrices' bf16 copies.
inline constexpr int64_t kQuantizedCopyReserveBytes = int64_t{512} << 20;

// Number of CUDA devices; 0 (never an error) when there is no driver.
int32_t DeviceCount();

// Creates the runner for `weights` (host memory; read at creation only, the
// object does not keep a reference) and the KV `geometry` of the engine's
// KvPool: device KV storage for geometry.num_pages pages of
// geometry.page_size tokens (kernels/cuda/cuda_kernels.h layout; page ids
// are the KvPool's) as geometry.dtype: f32 or bf16 (keys and values rounded
// to nearest even when stored, attention math in f32). Every buffer a step
// needs is allocated here for `max_batch_tokens` tokens.
//   UNIMPLEMENTED: MoE, hybrid linear-attention (Gated DeltaNet), gated
//     attention output or mRoPE models (dense Llama / Qwen3 only).
//   INVALID_ARGUMENT: geometry does not match the model, bad shapes, a KV
//     dtype other than f32 / bf16.
//   RESOURCE_EXHAUSTED: device memory (the message names the bytes).
//   FAILED_PRECONDITION: no device / driver.
absl::StatusOr<std::unique_ptr<ForwardBackend>> CreateCudaRunner(
    const ModelWeights& weights, const KvGeometry& geometry,
    int64_t max_batch_tokens, const RunnerOptions& options);

// A KvGeometry for tests and benches: `num_pages` pages of `page_size`
// tokens for the model's attention layers, keys and values stored as
// `dtype`.
KvGeometry MakeGeometry(const ModelConfig& config, int64_t page_size,
                        int64_t num_pages, int64_t max_sequences,
                        KvDType dtype = KvDType::kF32);

}  // namespace pdserve::cuda_runner

#endif  // PDSERVE_KERNELS_CUDA_PLUGIN_CUDA_RUNNER_H_
