// CudaRunner's step: validation, packing the inputs, upload, graphs, outputs.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/model/span_validation.h"
#include "kernels/cuda/plugin/cuda_check.h"
#include "kernels/cuda/plugin/runner_internal.h"

namespace pdserve::cuda_runner {
namespace {

int64_t CeilPow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

template <typename T>
T* At(void* base, int64_t offset) {
  return reinterpret_cast<T*>(static_cast<uint8_t*>(base) + offset);
}

}  // namespace

StepLayout StepLayout::For(int64_t rows, int64_t seqs) {
  StepLayout l;
  int64_t o = 0;
  l.tokens = o;
  o += 4 * rows;
  l.positions = o;
  o += 4 * rows;
  l.logit_src = o;
  o += 4 * rows;
  l.q_start = o;
  o += 4 * (seqs + 1);
  l.start_pos = o;
  o += 4 * seqs;
  l.page_start = o;
  o += 4 * (seqs + 1);
  l.params = AlignUp(o, 16);
  o = l.params + static_cast<int64_t>(sizeof(cuda::SampleParams)) * seqs;
  l.page_table = AlignUp(o, 16);
  return l;
}

absl::Status CudaRunner::Validate(absl::Span<const SequenceSpan> batch) const {
  SpanLimits limits;
  limits.max_positions = max_positions_;
  limits.num_pages = num_pages_;
  limits.page_size = page_size_;
  limits.max_batch_tokens = max_tokens_;
  int64_t pages_total = 0;
  if (absl::Status s = ValidateSpans(batch, config_, limits, &pages_total);
      !s.ok()) {
    return s;
  }
  if (pages_total + graph_max_ > pt_capacity_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch's page tables have ", pages_total, " entries in all, more than ",
        pt_capacity_ - graph_max_, " (KV pages ", num_pages_,
        " + max_batch_tokens ", max_tokens_, "); are pages shared?"));
  }
  return absl::OkStatus();
}

StepPlan PackStep(absl::Span<const SequenceSpan> batch,
                  absl::Span<const DeviceSamplingParams> params, bool sample,
                  const PackConfig& cfg, void* staging, void* device_inputs) {
  StepPlan plan;
  plan.sample = sample;
  plan.real_seqs = static_cast<int64_t>(batch.size());
  int64_t rows = 0, kv_max = 0, q_max = 0;
  bool decode = true;
  for (const SequenceSpan& s : batch) {
    rows += s.size();
    kv_max = std::max(kv_max, s.start_pos + s.size());
    q_max = std::max(q_max, s.size());
    decode &= s.size() == 1;
  }
  plan.decode = decode;
  plan.graph = cfg.use_graphs && decode && plan.real_seqs <= cfg.graph_max;
  plan.seqs = plan.graph ? CeilPow2(plan.real_seqs) : plan.real_seqs;
  plan.rows = plan.graph ? plan.seqs : rows;
  plan.max_q_len = q_max;
  plan.kv_bound = plan.graph
                      ? std::min(cfg.max_positions,
                                 std::max<int64_t>(128, CeilPow2(kv_max)))
                      : kv_max;
  void* h = staging;
  const StepLayout l = StepLayout::For(plan.rows, plan.seqs);
  auto* tokens = At<int32_t>(h, l.tokens);
  auto* positions = At<int32_t>(h, l.positions);
  auto* logit_src = At<int32_t>(h, l.logit_src);
  auto* q_start = At<int32_t>(h, l.q_start);
  auto* start_pos = At<int32_t>(h, l.start_pos);
  auto* page_start = At<int32_t>(h, l.page_start);
  auto* sp = At<cuda::SampleParams>(h, l.params);
  auto* pt = At<int32_t>(h, l.page_table);
  int64_t row = 0, pages = 0, logit_rows = 0;
  for (int64_t i = 0; i < plan.seqs; ++i) {
    q_start[i] = static_cast<int32_t>(row);
    page_start[i] = static_cast<int32_t>(pages);
    cuda::SampleParams p;
    if (i >= plan.real_seqs) {  // graph padding: one token on the scratch page
      tokens[row] = 0;
      positions[row] = 0;
      start_pos[i] = 0;
      logit_src[logit_rows++] = static_cast<int32_t>(row);
      ++row;
      pt[pages++] = cfg.scratch_page;
      sp[i] = p;
      continue;
    }
    const SequenceSpan& s = batch[i];
    start_pos[i] = static_cast<int32_t>(s.start_pos);
    const int64_t first = row;
    for (int64_t t = 0; t < s.size(); ++t, ++row) {
      tokens[row] = s.tokens[t];
      positions[row] = static_cast<int32_t>(s.start_pos + t + s.rope_delta);
    }
    const int64_t begin = (s.all_logits && !sample) ? first : row - 1;
    for (int64_t r = begin; r < row; ++r) {
      logit_src[logit_rows++] = static_cast<int32_t>(r);
    }
    const int64_t n_pages =
        (s.start_pos + s.size() + cfg.page_size - 1) / cfg.page_size;
    for (int64_t e = 0; e < n_pages; ++e) pt[pages++] = s.page_table[e];
    if (sample) {
      const DeviceSamplingParams& d = params[i];
      p.temperature = d.temperature;
      p.top_k = d.top_k;
      p.top_p = d.top_p;
      p.min_p = d.min_p;
      p.seed = d.seed;
      p.step = d.step;
    }
    sp[i] = p;
  }
  q_start[plan.seqs] = static_cast<int32_t>(row);
  page_start[plan.seqs] = static_cast<int32_t>(pages);
  plan.logit_rows = logit_rows;
  plan.pages = pages;

  void* d = device_inputs;
  plan.tokens = At<int32_t>(d, l.tokens);
  plan.positions = At<int32_t>(d, l.positions);
  plan.logit_src = At<int32_t>(d, l.logit_src);
  plan.params = At<cuda::SampleParams>(d, l.params);
  plan.attn.num_seqs = static_cast<int32_t>(plan.seqs);
  plan.attn.q_start = At<int32_t>(d, l.q_start);
  plan.attn.start_pos = At<int32_t>(d, l.start_pos);
  plan.attn.page_start = At<int32_t>(d, l.page_start);
  plan.attn.page_table = At<int32_t>(d, l.page_table);
  plan.attn.max_q_len = static_cast<int32_t>(plan.max_q_len);
  plan.attn.max_kv_len = static_cast<int32_t>(plan.kv_bound);
  plan.attn.total_rows = static_cast<int32_t>(plan.rows);
  return plan;
}

StepPlan CudaRunner::Pack(absl::Span<const SequenceSpan> batch,
                          absl::Span<const DeviceSamplingParams> params,
                          bool sample) {
  PackConfig cfg;
  cfg.use_graphs = options_.use_graphs;
  cfg.graph_max = graph_max_;
  cfg.max_positions = max_positions_;
  cfg.page_size = page_size_;
  cfg.scratch_page = static_cast<int32_t>(num_pages_);
  const int p = parity_;
  parity_ ^= 1;
  StepPlan plan = PackStep(batch, params, sample, cfg, staging_[p], inputs_[p]);
  plan.parity = p;
  return plan;
}

absl::Status CudaRunner::Upload(const StepPlan& plan) {
  const int p = plan.parity;
  const int64_t bytes =
      StepLayout::For(plan.rows, plan.seqs).page_table + 4 * plan.pages;
  // The device buffer may still be read by the step two back.
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_, step_done_[p], 0));
  PDSERVE_RETURN_IF_ERROR(MarkStepBegin());
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(inputs_[p], staging_[p], bytes,
                                               cudaMemcpyHostToDevice, copy_));
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventRecord(input_copied_[p], copy_));
  PDSERVE_CUDA_RETURN_IF_ERROR(
      cudaStreamWaitEvent(compute_, input_copied_[p], 0));
  return absl::OkStatus();
}

absl::Status CudaRunner::RunGraph(const StepPlan& plan) {
  const GraphKey key{plan.seqs, plan.kv_bound, plan.parity, plan.sample};
  auto it = graphs_.find(key);
  if (it != graphs_.end()) {
    PDSERVE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, compute_));
    return absl::OkStatus();
  }
  // First time: run eagerly (also warms up cuBLAS' lazy allocations), then
  // capture the same work for the next steps of this shape.
  PDSERVE_RETURN_IF_ERROR(EnqueueLayers(plan));
  PDSERVE_RETURN_IF_ERROR(EnqueueHead(plan, 0, plan.logit_rows, 0));
  if (graph_failed_.count(key) != 0) return absl::OkStatus();
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  PDSERVE_CUDA_RETURN_IF_ERROR(
      cudaStreamBeginCapture(compute_, cudaStreamCaptureModeThreadLocal));
  absl::Status s = EnqueueLayers(plan);
  if (s.ok()) s = EnqueueHead(plan, 0, plan.logit_rows, 0);
  const cudaError_t end = cudaStreamEndCapture(compute_, &graph);
  if (s.ok() && end == cudaSuccess) {
    s = CudaStatus(cudaGraphInstantiate(&exec, graph, 0),
                   "cudaGraphInstantiate");
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (!s.ok() || end != cudaSuccess || exec == nullptr) {
    cudaGetLastError();  // capture failed: stay eager for this shape
    graph_failed_[key] = true;
    // Once per shape: a silent fallback would show a capture-breaking
    // change (a sync or allocation in the step) only as a slowdown.
    const std::string why =
        !s.ok() ? std::string(s.message())
                : absl::StrCat("cudaStreamEndCapture: ", cudaGetErrorName(end));
    std::fprintf(stderr,
                 "pdserve cuda: decode graph capture failed (batch %lld, kv "
                 "bound %lld): %s; that shape runs eagerly\n",
                 static_cast<long long>(plan.seqs),
                 static_cast<long long>(plan.kv_bound), why.c_str());
    return absl::OkStatus();
  }
  graphs_[key] = exec;
  return absl::OkStatus();
}

absl::Status CudaRunner::CopyLogitsOut(const StepPlan& plan, float* logits) {
  const int64_t vocab = config_.vocab_size;
  // Graph steps computed every (padded) row in one chunk: copy the real
  // ones (the first real_seqs rows, one per sequence).
  const int64_t n = plan.graph ? plan.real_seqs : plan.logit_rows;
  PDSERVE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host_logits_[0], logits_[0], n * vocab * 4,
                      cudaMemcpyDeviceToHost, compute_));
  PDSERVE_RETURN_IF_ERROR(MarkStepEnd());
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
  std::memcpy(logits, host_logits_[0], n * vocab * 4);
  return absl::OkStatus();
}

absl::Status CudaRunner::CopySamplesOut(const StepPlan& plan,
                                        SampledToken* tokens) {
  const int64_t n = plan.real_seqs;
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      host_sampled_, sampled_, n * 4, cudaMemcpyDeviceToHost, compute_));
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      host_logprobs_, logprobs_, n * 4, cudaMemcpyDeviceToHost, compute_));
  PDSERVE_RETURN_IF_ERROR(MarkStepEnd());
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
  for (int64_t i = 0; i < n; ++i) {
    tokens[i].token = host_sampled_[i];
    tokens[i].logprob = host_logprobs_[i];
  }
  return absl::OkStatus();
}

absl::Status CudaRunner::Step(absl::Span<const SequenceSpan> batch,
                              absl::Span<const DeviceSamplingParams> params,
                              bool sample, float* logits, SampledToken* tokens,
                              ForwardStats* stats) {
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device_index));
  // The staging buffer of this parity is free once its last upload is done.
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(input_copied_[parity_]));
  const StepPlan plan = Pack(batch, params, sample);
  PDSERVE_RETURN_IF_ERROR(Upload(plan));
  if (plan.graph) {
    PDSERVE_RETURN_IF_ERROR(RunGraph(plan));
    PDSERVE_CUDA_RETURN_IF_ERROR(
        cudaEventRecord(step_done_[plan.parity], compute_));
    PDSERVE_RETURN_IF_ERROR(sample ? CopySamplesOut(plan, tokens)
                                   : CopyLogitsOut(plan, logits));
  } else {
    PDSERVE_RETURN_IF_ERROR(EnqueueLayers(plan));
    // LM head in chunks, double-buffered: chunk c computes into logits_[c%2]
    // while the copy stream moves chunk c-1 to pinned memory and the host
    // copies chunk c-2 out.
    const int64_t vocab = config_.vocab_size;
    const int64_t chunks = (plan.logit_rows + lm_chunk_ - 1) / lm_chunk_;
    auto drain = [&](int64_t c) -> absl::Status {
      const int b = static_cast<int>(c % 2);
      const int64_t first = c * lm_chunk_;
      const int64_t n = std::min(lm_chunk_, plan.logit_rows - first);
      PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(logits_copied_[b]));
      std::memcpy(logits + first * vocab, host_logits_[b], n * vocab * 4);
      return absl::OkStatus();
    };
    for (int64_t c = 0; c < chunks; ++c) {
      const int b = static_cast<int>(c % 2);
      const int64_t first = c * lm_chunk_;
      const int64_t n = std::min(lm_chunk_, plan.logit_rows - first);
      if (c >= 2) {  // logits_[b] is free once chunk c-2 left the device
        PDSERVE_CUDA_RETURN_IF_ERROR(
            cudaStreamWaitEvent(compute_, logits_copied_[b], 0));
      }
      PDSERVE_RETURN_IF_ERROR(EnqueueHead(plan, first, n, b));
      if (sample) continue;  // tokens land in sampled_ directly
      PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventRecord(logits_ready_[b], compute_));
      if (c >= 1)
        PDSERVE_RETURN_IF_ERROR(drain(c - 1));  // frees host_logits_[b^1]
      PDSERVE_CUDA_RETURN_IF_ERROR(
          cudaStreamWaitEvent(copy_, logits_ready_[b], 0));
      PDSERVE_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(host_logits_[b], logits_[b], n * vocab * 4,
                          cudaMemcpyDeviceToHost, copy_));
      PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventRecord(logits_copied_[b], copy_));
    }
    PDSERVE_CUDA_RETURN_IF_ERROR(
        cudaEventRecord(step_done_[plan.parity], compute_));
    if (sample) {
      PDSERVE_RETURN_IF_ERROR(CopySamplesOut(plan, tokens));
    } else {
      // The last chunk's copy runs on copy_ after this: not counted busy.
      PDSERVE_RETURN_IF_ERROR(MarkStepEnd());
      if (chunks >= 1) PDSERVE_RETURN_IF_ERROR(drain(chunks - 1));
      PDSERVE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
    }
  }
  if (stats != nullptr) {
    // Graph steps computed padded rows too; count the batch's own.
    Account(batch, (sample || plan.graph) ? plan.real_seqs : plan.logit_rows,
            stats);
  }
  return absl::OkStatus();
}

absl::Status CudaRunner::Run(absl::Span<const SequenceSpan> batch,
                             absl::Span<float> logits, ForwardStats* stats) {
  PDSERVE_RETURN_IF_ERROR(Validate(batch));
  int64_t rows = 0;
  for (const SequenceSpan& s : batch) rows += s.logit_rows();
  const int64_t need = rows * config_.vocab_size;
  if (static_cast<int64_t>(logits.size()) < need) {
    return absl::InvalidArgumentError(
        absl::StrCat("logits buffer holds ", logits.size(), " floats, need ",
                     need, " (", rows, " rows of ", config_.vocab_size, ")"));
  }
  if (batch.empty()) return absl::OkStatus();
  return Step(batch, {}, /*sample=*/false, logits.data(), nullptr, stats);
}

absl::Status CudaRunner::RunAndSample(
    absl::Span<const SequenceSpan> batch,
    absl::Span<const DeviceSamplingParams> params,
    absl::Span<SampledToken> tokens, ForwardStats* stats) {
  PDSERVE_RETURN_IF_ERROR(Validate(batch));
  if (params.size() != batch.size() || tokens.size() < batch.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RunAndSample: ", batch.size(), " spans, ", params.size(),
        " sampling parameters, room for ", tokens.size(), " tokens"));
  }
  if (batch.empty()) return absl::OkStatus();
  return Step(batch, params, /*sample=*/true, nullptr, tokens.data(), stats);
}

absl::Status CudaRunner::MarkStepBegin() {
  if (!options_.step_timing || timed_steps_ >= kMaxTimedSteps) {
    return absl::OkStatus();
  }
  while (static_cast<int64_t>(timing_events_.size()) < 2 * timed_steps_ + 2) {
    cudaEvent_t ev = nullptr;
    PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&ev));
    timing_events_.push_back(ev);
  }
  PDSERVE_CUDA_RETURN_IF_ERROR(
      cudaEventRecord(timing_events_[2 * timed_steps_], copy_));
  timing_open_ = true;
  return absl::OkStatus();
}

absl::Status CudaRunner::MarkStepEnd() {
  if (!timing_open_) return absl::OkStatus();
  PDSERVE_CUDA_RETURN_IF_ERROR(
      cudaEventRecord(timing_events_[2 * timed_steps_ + 1], compute_));
  timing_open_ = false;
  ++timed_steps_;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CudaRunner::StepTiming>>
CudaRunner::TakeStepTimings() {
  std::vector<StepTiming> out(timed_steps_);
  for (int64_t i = 0; i < timed_steps_; ++i) {
    cudaEvent_t begin = timing_events_[2 * i], end = timing_events_[2 * i + 1];
    PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(end));
    float ms = 0.0f;
    PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, begin, end));
    out[i].busy_ms = ms;
    if (i > 0) {
      PDSERVE_CUDA_RETURN_IF_ERROR(
          cudaEventElapsedTime(&ms, timing_events_[2 * i - 1], begin));
      out[i].gap_ms = std::max(0.0f, ms);
    }
  }
  timed_steps_ = 0;
  return out;
}

void CudaRunner::Account(absl::Span<const SequenceSpan> batch,
                         int64_t logit_rows, ForwardStats* stats) const {
  const ModelConfig& c = config_;
  int64_t rows = 0;
  for (const SequenceSpan& s : batch) rows += s.size();
  ForwardStats s;
  s.steps = 1;
  s.tokens = rows;
  s.logit_rows = logit_rows;
  s.weight_bytes_read = model_->layer_bytes +
                        rows * model_->embedding.row_bytes +
                        (logit_rows > 0 ? model_->lm_head_bytes : 0);
  if (rows > std::max<int64_t>(options_.matvec_max_tokens, 32) &&
      gemm_scratch_ != nullptr) {  // quantized products read bf16 (Linear)
    s.weight_bytes_read +=
        2 * model_->layer_quantized_elems - model_->layer_quantized_bytes;
  }
  const int64_t kv_token_bytes = c.num_layers * 2 * c.kv_dim() * kv_elem_bytes_;
  int64_t attn_macs = 0;
  for (const SequenceSpan& span : batch) {
    s.kv_bytes_read += (span.start_pos + span.size()) * kv_token_bytes;
    s.kv_bytes_written += span.size() * kv_token_bytes;
    const int64_t keys =
        span.size() * span.start_pos + span.size() * (span.size() + 1) / 2;
    attn_macs += 2 * keys * c.head_dim * c.num_heads;
  }
  s.flops = 2 * (rows * model_->layer_macs + c.num_layers * attn_macs +
                 logit_rows * c.vocab_size * c.hidden_size);
  // ForwardStats::operator+= lives in pdserve_model; add field by field so
  // the plugin needs no host model library.
  stats->steps += s.steps;
  stats->tokens += s.tokens;
  stats->logit_rows += s.logit_rows;
  stats->weight_bytes_read += s.weight_bytes_read;
  stats->kv_bytes_read += s.kv_bytes_read;
  stats->kv_bytes_written += s.kv_bytes_written;
  stats->flops += s.flops;
}

}  // namespace pdserve::cuda_runner
