// The CudaRunner class behind CreateCudaRunner (cuda_runner.h). Internal to
// the plugin: the runner's .cc files and its tests include it.
#ifndef PDSERVE_KERNELS_CUDA_PLUGIN_RUNNER_INTERNAL_H_
#define PDSERVE_KERNELS_CUDA_PLUGIN_RUNNER_INTERNAL_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/plugin/cuda_runner.h"
#include "kernels/cuda/plugin/device_model.h"

namespace pdserve::cuda_runner {

// Byte offsets of one step's inputs inside the (pinned host / device) input
// buffer, for `rows` token rows and `seqs` sequences. The page table is last
// so its length does not move anything else.
struct StepLayout {
  int64_t tokens = 0;      // int32 [rows]
  int64_t positions = 0;   // int32 [rows]: RoPE position (pos + rope_delta)
  int64_t logit_src = 0;   // int32 [rows]: x row of each logits row
  int64_t q_start = 0;     // int32 [seqs + 1]
  int64_t start_pos = 0;   // int32 [seqs]
  int64_t page_start = 0;  // int32 [seqs + 1]
  int64_t params = 0;      // cuda::SampleParams [seqs]
  int64_t page_table = 0;  // int32 [pages]
  static StepLayout For(int64_t rows, int64_t seqs);
};

// Everything one step's kernels need, host side; pointers are device
// pointers into the input buffer in use.
struct StepPlan {
  int64_t rows = 0;        // token rows computed (padded for graphs)
  int64_t seqs = 0;        // sequences (padded for graphs)
  int64_t real_seqs = 0;   // sequences of the batch
  int64_t logit_rows = 0;  // rows of logits computed
  bool decode = false;     // every sequence has one new token
  bool sample = false;     // RunAndSample
  bool graph = false;      // replay / capture a CUDA graph
  int parity = 0;          // which input buffer
  int64_t kv_bound = 0;    // upper bound of positions + 1 (grid sizes)
  int64_t max_q_len = 0;
  int64_t pages = 0;  // page-table entries used
  const int32_t* tokens = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* logit_src = nullptr;
  const cuda::SampleParams* params = nullptr;
  cuda::AttentionBatch attn;
};

// How PackStep lays out a step (the runner's fixed parameters).
struct PackConfig {
  bool use_graphs = true;
  int64_t graph_max = 0;      // largest decode batch run as a graph
  int64_t max_positions = 0;  // bound of kv_bound for graph buckets
  int64_t page_size = 0;
  int32_t scratch_page = 0;  // page of the padded graph rows
};

// Writes one step's inputs into `staging` (StepLayout; big enough for the
// batch) and returns the plan, its pointers into `device_inputs` (the
// buffer the staging is copied to). Decode batches of at most graph_max
// sequences (graphs on) are padded to the next power of two with one-token
// rows on the scratch page and get kv_bound = the next power of two >= the
// longest sequence (at least 128, at most max_positions). Logits rows: every
// row of an all_logits span (not when sampling), else its last row. Pure
// host code (testable without a device); parity is left 0.
StepPlan PackStep(absl::Span<const SequenceSpan> batch,
                  absl::Span<const DeviceSamplingParams> params, bool sample,
                  const PackConfig& cfg, void* staging, void* device_inputs);

class CudaRunner final : public ForwardBackend {
 public:
  static absl::StatusOr<std::unique_ptr<CudaRunner>> Create(
      const ModelWeights& weights, const KvGeometry& geometry,
      int64_t max_batch_tokens, const RunnerOptions& options);
  ~CudaRunner() override;

  std::string Describe() const override { return description_; }
  int64_t max_batch_tokens() const override { return max_tokens_; }
  int64_t max_positions() const override { return max_positions_; }
  absl::Status Run(absl::Span<const SequenceSpan> batch,
                   absl::Span<float> logits, ForwardStats* stats) override;
  bool SamplesOnDevice() const override { return true; }
  absl::Status RunAndSample(absl::Span<const SequenceSpan> batch,
                            absl::Span<const DeviceSamplingParams> params,
                            absl::Span<SampledToken> tokens,
                            ForwardStats* stats) override;
  // The device read probe (read_probe.h) on this runner's device.
  absl::StatusOr<double> MeasureReadBandwidth(int64_t buffer_bytes) override;
  // Quantized matrices dequantized to bf16 inside steps so far (GEMM path
  // without converted copies; RunnerOptions::quantized_gemm; enqueued, so
  // a graph replay does not count again).
  int64_t per_step_dequantizations() const { return per_step_dequant_; }

  // The device timeline of the steps since the last call, in order
  // (RunnerOptions::step_timing; empty without it): busy_ms from the step's
  // first device operation (its input upload) to its last (the results'
  // copy to the host), gap_ms the device time since the previous timed
  // step's end (0 for the first after a call). At most kMaxTimedSteps steps
  // are kept; later ones are dropped. Synchronises with the device.
  struct StepTiming {
    double busy_ms = 0.0;
    double gap_ms = 0.0;
  };
  static constexpr int64_t kMaxTimedSteps = 4096;
  absl::StatusOr<std::vector<StepTiming>> TakeStepTimings();

 private:
  enum class AttnKind { kDecode, kPrefill, kFallback, kFlash };
  using GraphKey =
      std::tuple<int64_t, int64_t, int, bool>;  // B, kv, parity, sample

  CudaRunner(const ModelConfig& config, const RunnerOptions& options);
  absl::Status Init(const ModelWeights& weights, const KvGeometry& geometry,
                    int64_t max_batch_tokens);
  absl::Status Allocate(void** ptr, int64_t bytes, const char* what);
  absl::Status AllocatePinned(void** ptr, int64_t bytes, const char* what);
  // The quantized GEMM weights (RunnerOptions::quantized_gemm): converts
  // the bf16 copies or allocates the per-step scratch.
  absl::Status PrepareQuantizedGemm();

  // runner_step.cc
  absl::Status Validate(absl::Span<const SequenceSpan> batch) const;
  StepPlan Pack(absl::Span<const SequenceSpan> batch,
                absl::Span<const DeviceSamplingParams> params, bool sample);
  absl::Status Upload(const StepPlan& plan);
  absl::Status Step(absl::Span<const SequenceSpan> batch,
                    absl::Span<const DeviceSamplingParams> params, bool sample,
                    float* logits, SampledToken* tokens, ForwardStats* stats);
  absl::Status RunGraph(const StepPlan& plan);
  absl::Status CopyLogitsOut(const StepPlan& plan, float* logits);
  absl::Status CopySamplesOut(const StepPlan& plan, SampledToken* tokens);
  // Step timing: the current step's begin event on copy_ / end event on
  // compute_ (no-ops without RunnerOptions::step_timing or once full).
  absl::Status MarkStepBegin();
  absl::Status MarkStepEnd();
  void Account(absl::Span<const SequenceSpan> batch, int64_t logit_rows,
               ForwardStats* stats) const;

  // runner_forward.cc: enqueue on compute_ (graph-capturable).
  absl::Status EnqueueLayers(const StepPlan& plan);
  // LM head (and sampling) of logits rows [first, first + n) into the
  // logits buffer `buf`.
  absl::Status EnqueueHead(const StepPlan& plan, int64_t first, int64_t n,
                           int buf);
  absl::Status Linear(const cuda::DeviceMatrix& w, const float* x,
                      int64_t x_stride, int64_t n, float* y, int64_t y_stride);
  AttnKind ChooseAttention(const StepPlan& plan) const;
  absl::Status Attention(const StepPlan& plan, AttnKind kind, int64_t layer);

  const ModelConfig config_;
  const RunnerOptions options_;
  std::string description_;
  int64_t max_tokens_ = 0;
  int64_t max_positions_ = 0;
  int64_t num_pages_ = 0;  // the KvPool's pages; page num_pages_ is scratch
  int64_t page_size_ = 0;
  int64_t pt_capacity_ = 0;  // page-table entries one step may carry
  int64_t graph_max_ = 0;    // largest decode bucket captured
  int64_t lm_chunk_ = 0;     // logits rows per LM-head chunk
  int64_t input_bytes_ = 0;  // capacity of one input buffer
  bool quantized_ = false;   // some matrix is Q8_0/Q4_0/Q4_1

  std::unique_ptr<DeviceModel> model_;
  cuda::DeviceKvCache kv_;
  cuda::AttentionShape shape_;
  cuda::CublasGemm gemm_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t copy_ = nullptr;
  // Double-buffered step inputs: pinned staging -> device, on copy_.
  void* staging_[2] = {nullptr, nullptr};
  void* inputs_[2] = {nullptr, nullptr};
  cudaEvent_t input_copied_[2] = {nullptr, nullptr};
  cudaEvent_t step_done_[2] = {nullptr, nullptr};
  int parity_ = 0;
  // Double-buffered logits (LM-head chunks): device -> pinned, on copy_.
  float* logits_[2] = {nullptr, nullptr};
  float* host_logits_[2] = {nullptr, nullptr};
  cudaEvent_t logits_ready_[2] = {nullptr, nullptr};
  cudaEvent_t logits_copied_[2] = {nullptr, nullptr};
  int32_t* sampled_ = nullptr;  // [max_tokens]
  float* logprobs_ = nullptr;   // [max_tokens]
  int32_t* host_sampled_ = nullptr;
  float* host_logprobs_ = nullptr;
  // Activations [max_tokens][width].
  // qkv_: [q | k | v] per row (qkv_width_ floats); gu_: [gate | up] per
  // row (2 * intermediate), SwiGLU written over the gate half.
  float *x_ = nullptr, *xn_ = nullptr, *qkv_ = nullptr, *attn_ = nullptr,
        *gu_ = nullptr, *proj_ = nullptr, *cos_ = nullptr, *sin_ = nullptr;
  int64_t qkv_width_ = 0;
  float *head_x_ = nullptr, *head_xn_ = nullptr;  // [lm_chunk][hidden]
  void* gemm_scratch_ = nullptr;
  int64_t gemm_scratch_bytes_ = 0;
  void* dequant_ = nullptr;  // bf16 copy of one quantized matrix (GEMM)
  int64_t per_step_dequant_ = 0;
  int64_t kv_elem_bytes_ = 4;  // f32 or bf16 cache
  void* decode_ws_ = nullptr;
  int64_t decode_ws_bytes_ = 0;
  std::vector<void*> device_allocs_;
  std::vector<void*> pinned_allocs_;
  // Step timing events: [2i] begin, [2i + 1] end of timed step i.
  std::vector<cudaEvent_t> timing_events_;
  int64_t timed_steps_ = 0;
  bool timing_open_ = false;  // begin recorded, end not yet
  std::map<GraphKey, cudaGraphExec_t> graphs_;
  std::map<GraphKey, bool> graph_failed_;
};

}  // namespace pdserve::cuda_runner

#endif  // PDSERVE_KERNELS_CUDA_PLUGIN_RUNNER_INTERNAL_H_
