// Plain statistics structs that the engine, scheduler and front end compute
// and hand to their metric sets (common/metrics/*_metrics.h). This header has
// no Prometheus dependency: the pure cores fill these structs, only the IO
// shells include the exporters. All durations are in seconds, sizes in bytes,
// counts are plain integers.
#ifndef PDSERVE_COMMON_METRICS_STATS_H_
#define PDSERVE_COMMON_METRICS_STATS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace pdserve::metrics {

// What one engine step processed: only prompt chunks, only decode tokens, or
// both in one batched forward pass.
enum class StepKind { kPrefill, kDecode, kMixed };

// "prefill" / "decode" / "mixed": the `kind` label value.
absl::string_view StepKindName(StepKind kind);

// The kind implied by the token counts (mixed when both are non-zero; decode
// when both are zero, which callers should not record).
StepKind ClassifyStep(int64_t prefill_tokens, int64_t decode_tokens);

// One engine step, as measured by the engine core. `duration_seconds` is the
// wall time of the whole step (forward pass plus sampling). Byte counts are
// what the step moved through memory: weights read once per step, KV pages
// read by attention, KV written for the new tokens, and linear-attention
// (conv + recurrent) state read and written. `flops` counts multiply-adds as
// two operations; 0 when the engine does not count them.
struct StepStats {
  StepKind kind = StepKind::kDecode;
  double duration_seconds = 0.0;
  int64_t prefill_tokens = 0;  // prompt tokens processed in this step
  int64_t decode_tokens = 0;   // decode tokens processed (1 per sequence)
  int64_t batch_size = 0;      // sequences in the step
  int64_t weight_bytes_read = 0;
  int64_t kv_bytes_read = 0;
  int64_t kv_bytes_written = 0;
  int64_t state_bytes = 0;  // linear-attention state read + written
  double flops = 0.0;
};

// Every byte the step moved (weights + KV read + KV written + state).
int64_t StepBytesMoved(const StepStats& step);

// Achieved memory bandwidth of a step in bytes per second: StepBytesMoved ÷
// duration_seconds; 0 when the duration is not positive.
double AchievedBandwidth(const StepStats& step);

// Achieved FLOP/s of a step; 0 when the duration is not positive.
double AchievedFlopsPerSecond(const StepStats& step);

// OK when every count is >= 0, the duration is finite and > 0, the batch
// holds at least one sequence and the kind matches the token counts;
// otherwise INVALID_ARGUMENT naming the offending field and value.
absl::Status ValidateStepStats(const StepStats& step);

// A snapshot of the engine's KV capacity pools. Token figures count token
// positions over all full-attention layers' pages (a token occupies one slot
// in every layer). `preemptions_total` is cumulative since the engine started.
// Linear-attention slots are the fixed-size per-sequence state slots of hybrid
// models; both are 0 for models without linear attention.
struct PoolStats {
  int64_t capacity_tokens = 0;
  int64_t used_tokens = 0;
  int64_t page_size_tokens = 0;
  int64_t total_pages = 0;
  int64_t used_pages = 0;
  int64_t capacity_bytes = 0;  // memory held by the KV pool
  int64_t active_sequences = 0;
  int64_t max_sequences = 0;
  int64_t preemptions_total = 0;
  int64_t linear_state_slots_total = 0;
  int64_t linear_state_slots_used = 0;
  // Prefix cache: cumulative prompt tokens looked up and found; free pages
  // still holding cached data.
  int64_t prefix_query_tokens_total = 0;
  int64_t prefix_hit_tokens_total = 0;
  int64_t cached_pages = 0;
};

// Fraction of the pool in use, 0..1: used / total pages, or used / capacity
// tokens when the pool has no pages; 0 for an empty (zero-sized) pool.
double PoolUsageFraction(const PoolStats& pool);

// OK when every figure is >= 0 and no "used" exceeds its total; otherwise
// INVALID_ARGUMENT naming both numbers.
absl::Status ValidatePoolStats(const PoolStats& pool);

// One scheduler iteration: queue gauges after the plan was built, and the
// events that happened while building it (deltas, not totals). The planned
// token counts describe the step plan sent to the engine.
struct SchedulerStats {
  int64_t waiting_requests = 0;
  int64_t running_requests = 0;
  int64_t admitted = 0;
  int64_t preempted = 0;
  int64_t cancelled = 0;
  int64_t finished = 0;
  int64_t planned_prefill_tokens = 0;
  int64_t planned_decode_tokens = 0;
  int64_t token_budget = 0;  // per-step token budget the plan was cut to
  // The KV ledger's pages after the plan (free counts cached prefix pages, as
  // vLLM counts its evictable blocks); kv_total_pages 0 = not reported.
  int64_t kv_total_pages = 0;
  int64_t kv_free_pages = 0;
};

// OK when every figure is >= 0, the planned tokens fit the budget (a zero
// budget means "not reported") and the free KV pages do not exceed the total;
// otherwise INVALID_ARGUMENT with the numbers.
absl::Status ValidateSchedulerStats(const SchedulerStats& stats);

// Why the scheduler refused a request at submission.
enum class RejectReason {
  kQueueFull,        // bounded waiting queue is full (RESOURCE_EXHAUSTED)
  kPromptTooLong,    // prompt + max_tokens exceed capacity (INVALID_ARGUMENT)
  kPoolTooSmall,     // could never fit the pool (RESOURCE_EXHAUSTED)
  kInvalidArgument,  // any other validation failure
  kDraining,         // the process is shutting down (UNAVAILABLE)
};

// The `reason` label value: "queue_full", "prompt_too_long", ...
absl::string_view RejectReasonName(RejectReason reason);

// One finished front-end request. `grpc_code` is the numeric grpc::StatusCode
// (0 = OK .. 16 = UNAUTHENTICATED) the RPC ended with. Latency fields are
// seconds; a negative value means "not measured" (e.g. no token was produced,
// so there is no TTFT) and is not observed. `prefill_seconds` runs from
// admission to the first token, `decode_seconds` from the first to the last
// token, `queue_seconds` from submission to admission.
struct RequestStats {
  absl::string_view method = "Generate";  // RPC name, a bounded set
  // Which public API served it: "grpc" (counted by method and code) or
  // "http" (counted by route and status with RecordHttpRequest). Labels
  // the TTFT, inter-token and end-to-end histograms.
  absl::string_view api = "grpc";
  int grpc_code = 0;
  double ttft_seconds = -1.0;
  double e2e_seconds = -1.0;
  double queue_seconds = -1.0;
  double prefill_seconds = -1.0;
  double decode_seconds = -1.0;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  absl::string_view finish_reason = "";  // stop, length, cancelled, error, ""
};

// The canonical gRPC code name ("OK", "INVALID_ARGUMENT", ...); "UNKNOWN" for
// values outside 0..16.
absl::string_view GrpcCodeName(int code);

}  // namespace pdserve::metrics

#endif  // PDSERVE_COMMON_METRICS_STATS_H_
