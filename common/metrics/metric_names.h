// Every metric pdserve exports: name, type and HELP text, in one table. The
// metric sets register exactly these; tests check that the /metrics pages,
// the Grafana dashboard, the alert rules and deploy/README.md agree with it.
// Naming: `pdserve_<process>_...`, units in the name (_seconds, _bytes,
// _tokens, _ratio), counters end in _total. The `vllm:` names are the
// compatibility gauges that Kubernetes inference routers and autoscalers read;
// they are exported only when the metric set's `vllm_compat` option is on.
#ifndef PDSERVE_COMMON_METRICS_METRIC_NAMES_H_
#define PDSERVE_COMMON_METRICS_METRIC_NAMES_H_

namespace pdserve::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

// One exported metric family. Plain constants: safe to use anywhere.
struct MetricSpec {
  const char* name;
  MetricType type;
  const char* help;
};

// ---- every process (MetricsServer) ----
inline constexpr MetricSpec kBuildInfo = {
    "pdserve_build_info", MetricType::kGauge,
    "Always 1; labels name the pdserve version and the process."};
inline constexpr MetricSpec kReady = {
    "pdserve_ready", MetricType::kGauge,
    "1 when the process serves (engine: model loaded), else 0."};
inline constexpr MetricSpec kStartTime = {
    "pdserve_process_start_time_seconds", MetricType::kGauge,
    "Unix time the process started, in seconds."};

// ---- engine: steps ----
inline constexpr MetricSpec kStepDuration = {
    "pdserve_engine_step_duration_seconds", MetricType::kHistogram,
    "Wall time of one engine step (forward pass plus sampling), by kind."};
inline constexpr MetricSpec kEngineTokens = {
    "pdserve_engine_tokens_total", MetricType::kCounter,
    "Tokens processed by engine steps, by kind (prefill, decode)."};
inline constexpr MetricSpec kBatchSize = {
    "pdserve_engine_batch_size", MetricType::kHistogram,
    "Sequences in one engine step, by step kind."};
inline constexpr MetricSpec kMemoryBytes = {
    "pdserve_engine_memory_bytes_total", MetricType::kCounter,
    "Bytes moved through memory by engine steps, by kind (weights_read, "
    "kv_read, kv_written, state)."};
inline constexpr MetricSpec kBandwidthGauge = {
    "pdserve_engine_memory_bandwidth_bytes_per_second", MetricType::kGauge,
    "Achieved memory bandwidth of the last step: bytes moved / step time."};
inline constexpr MetricSpec kBandwidthHistogram = {
    "pdserve_engine_step_memory_bandwidth_bytes_per_second",
    MetricType::kHistogram,
    "Achieved memory bandwidth per step (bytes moved / step time), by kind."};
inline constexpr MetricSpec kBandwidthRatio = {
    "pdserve_engine_memory_bandwidth_utilization_ratio", MetricType::kGauge,
    "Achieved memory bandwidth of the last step / the device peak."};
inline constexpr MetricSpec kPeakBandwidth = {
    "pdserve_engine_peak_memory_bandwidth_bytes_per_second", MetricType::kGauge,
    "Device peak memory bandwidth used for the ratio; source=configured or "
    "probe (a timed copy at start)."};
inline constexpr MetricSpec kFlopsGauge = {
    "pdserve_engine_achieved_flop_per_second", MetricType::kGauge,
    "Achieved floating-point operations per second of the last step."};
inline constexpr MetricSpec kFlopTotal = {
    "pdserve_engine_flop_total", MetricType::kCounter,
    "Floating-point operations executed by engine steps."};
inline constexpr MetricSpec kPeakFlops = {
    "pdserve_engine_peak_flop_per_second", MetricType::kGauge,
    "Configured device peak FLOP/s (0 when not configured)."};

// ---- engine: KV pool and linear-attention state ----
inline constexpr MetricSpec kKvCapacityTokens = {
    "pdserve_engine_kv_capacity_tokens", MetricType::kGauge,
    "Token positions the KV pool can hold."};
inline constexpr MetricSpec kKvUsedTokens = {
    "pdserve_engine_kv_used_tokens", MetricType::kGauge,
    "Token positions held by live sequences."};
inline constexpr MetricSpec kKvFreeTokens = {
    "pdserve_engine_kv_free_tokens", MetricType::kGauge,
    "Token positions free in the KV pool."};
inline constexpr MetricSpec kKvCapacityPages = {
    "pdserve_engine_kv_capacity_pages", MetricType::kGauge,
    "Pages in the KV pool."};
inline constexpr MetricSpec kKvUsedPages = {"pdserve_engine_kv_used_pages",
                                            MetricType::kGauge,
                                            "Pages held by live sequences."};
inline constexpr MetricSpec kKvFreePages = {"pdserve_engine_kv_free_pages",
                                            MetricType::kGauge,
                                            "Pages free in the KV pool."};
inline constexpr MetricSpec kKvPageSize = {"pdserve_engine_kv_page_size_tokens",
                                           MetricType::kGauge,
                                           "Token positions per KV page."};
inline constexpr MetricSpec kKvCapacityBytes = {
    "pdserve_engine_kv_capacity_bytes", MetricType::kGauge,
    "Memory held by the KV pool, in bytes."};
inline constexpr MetricSpec kKvUsage = {
    "pdserve_engine_kv_usage_ratio", MetricType::kGauge,
    "Fraction of the KV pool in use (used / total pages), 0..1."};
inline constexpr MetricSpec kActiveSequences = {
    "pdserve_engine_active_sequences", MetricType::kGauge,
    "Sequences holding pool capacity."};
inline constexpr MetricSpec kMaxSequences = {
    "pdserve_engine_max_sequences", MetricType::kGauge,
    "Most sequences the engine holds at once."};
inline constexpr MetricSpec kEnginePreemptions = {
    "pdserve_engine_preemptions_total", MetricType::kCounter,
    "Sequences whose pool capacity was taken back before they finished."};
inline constexpr MetricSpec kPrefixQueryTokens = {
    "pdserve_engine_prefix_cache_queries_total", MetricType::kCounter,
    "Prompt tokens admitted while the prefix cache is on (tokens looked up)."};
inline constexpr MetricSpec kPrefixHitTokens = {
    "pdserve_engine_prefix_cache_hits_total", MetricType::kCounter,
    "Prompt tokens taken from cached KV pages instead of computed."};
inline constexpr MetricSpec kKvCachedPages = {
    "pdserve_engine_kv_cached_pages", MetricType::kGauge,
    "Free KV pages still holding a cached prefix (reclaimed on demand)."};
inline constexpr MetricSpec kLinearSlotsTotal = {
    "pdserve_engine_linear_state_capacity_slots", MetricType::kGauge,
    "Per-sequence linear-attention state slots (0 without such layers)."};
inline constexpr MetricSpec kLinearSlotsUsed = {
    "pdserve_engine_linear_state_used_slots", MetricType::kGauge,
    "Linear-attention state slots held by live sequences."};

// ---- scheduler ----
inline constexpr MetricSpec kWaiting = {
    "pdserve_scheduler_requests_waiting", MetricType::kGauge,
    "Requests in the waiting queue, not yet admitted."};
inline constexpr MetricSpec kRunning = {
    "pdserve_scheduler_requests_running", MetricType::kGauge,
    "Requests admitted and holding pool capacity."};
inline constexpr MetricSpec kAdmissions = {
    "pdserve_scheduler_admissions_total", MetricType::kCounter,
    "Requests admitted into the running set (re-admissions included)."};
inline constexpr MetricSpec kRejections = {
    "pdserve_scheduler_rejections_total", MetricType::kCounter,
    "Requests refused at submission, by reason."};
inline constexpr MetricSpec kCancellations = {
    "pdserve_scheduler_cancellations_total", MetricType::kCounter,
    "Requests cancelled (client gone or cancel RPC) before finishing."};
inline constexpr MetricSpec kSchedPreemptions = {
    "pdserve_scheduler_preemptions_total", MetricType::kCounter,
    "Running requests preempted to make room in the pool."};
inline constexpr MetricSpec kFinished = {
    "pdserve_scheduler_finished_total", MetricType::kCounter,
    "Requests that finished (stop or length)."};
inline constexpr MetricSpec kIterations = {
    "pdserve_scheduler_iterations_total", MetricType::kCounter,
    "Scheduler iterations (step plans built)."};
inline constexpr MetricSpec kPlannedTokens = {
    "pdserve_scheduler_planned_tokens_total", MetricType::kCounter,
    "Tokens placed into step plans, by kind (prefill, decode)."};
inline constexpr MetricSpec kEngineLosses = {
    "pdserve_scheduler_engine_losses_total", MetricType::kCounter,
    "Times the scheduler lost its engine (killed, hung past the step "
    "timeout, restarted, stream broken)."};
inline constexpr MetricSpec kResumedRequests = {
    "pdserve_scheduler_resumed_requests_total", MetricType::kCounter,
    "Requests resumed by recompute after their engine was lost, or "
    "resubmitted by a front end after their scheduler was lost."};
inline constexpr MetricSpec kRecomputedTokens = {
    "pdserve_scheduler_recomputed_tokens_total", MetricType::kCounter,
    "Prompt and generated tokens prefilled again to resume requests after "
    "an engine or scheduler loss."};
inline constexpr MetricSpec kUnrecovered = {
    "pdserve_scheduler_unrecovered_requests_total", MetricType::kCounter,
    "Requests ended UNAVAILABLE because their engine was lost and they "
    "could not be resumed (recovery time spent, resumed too often, no fit)."};
inline constexpr MetricSpec kRecoveryTime = {
    "pdserve_scheduler_engine_recovery_seconds", MetricType::kHistogram,
    "Time from losing the engine to resuming its requests on one again."};
inline constexpr MetricSpec kHandoffs = {
    "pdserve_scheduler_kv_handoffs_total", MetricType::kCounter,
    "Prefill/decode KV hand-offs a decode cell asked its engine to fetch, "
    "by outcome (imported; refused: prefilled locally instead)."};
inline constexpr MetricSpec kHandoffTime = {
    "pdserve_scheduler_kv_handoff_seconds", MetricType::kHistogram,
    "Time to fetch, check and stage one KV hand-off from a prefill cell."};
inline constexpr MetricSpec kHandoffBytes = {
    "pdserve_scheduler_kv_handoff_bytes_total", MetricType::kCounter,
    "Bytes of KV and linear-attention state fetched from prefill cells."};
inline constexpr MetricSpec kTokenBudget = {
    "pdserve_scheduler_token_budget_tokens", MetricType::kGauge,
    "Per-step token budget the plans are cut to."};

// ---- front end ----
inline constexpr MetricSpec kRequests = {
    "pdserve_frontend_requests_total", MetricType::kCounter,
    "Finished RPCs, by method and gRPC status code."};
inline constexpr MetricSpec kHttpRequests = {
    "pdserve_frontend_http_requests_total", MetricType::kCounter,
    "Finished HTTP requests (OpenAI / Anthropic API), by route and status "
    "code."};
inline constexpr MetricSpec kInFlight = {"pdserve_frontend_requests_in_flight",
                                         MetricType::kGauge,
                                         "RPCs started and not yet finished."};
inline constexpr MetricSpec kFinishReasons = {
    "pdserve_frontend_finish_reasons_total", MetricType::kCounter,
    "Finished generations, by finish reason (stop, length, cancelled, "
    "error)."};
inline constexpr MetricSpec kTtft = {
    "pdserve_frontend_time_to_first_token_seconds", MetricType::kHistogram,
    "Time from receiving a request to streaming its first token, by API "
    "(grpc, http)."};
inline constexpr MetricSpec kItl = {
    "pdserve_frontend_inter_token_latency_seconds", MetricType::kHistogram,
    "Time between two consecutive streamed tokens of one request, by API."};
inline constexpr MetricSpec kE2e = {
    "pdserve_frontend_request_duration_seconds", MetricType::kHistogram,
    "End-to-end time of a request, receipt to final message, by API."};
inline constexpr MetricSpec kQueueTime = {
    "pdserve_frontend_request_queue_seconds", MetricType::kHistogram,
    "Time a request waited in the scheduler queue before admission."};
inline constexpr MetricSpec kPrefillTime = {
    "pdserve_frontend_request_prefill_seconds", MetricType::kHistogram,
    "Time from admission to the first token of a request (prefill)."};
inline constexpr MetricSpec kDecodeTime = {
    "pdserve_frontend_request_decode_seconds", MetricType::kHistogram,
    "Time from the first to the last token of a request (decode)."};
inline constexpr MetricSpec kPromptTokens = {
    "pdserve_frontend_prompt_tokens_total", MetricType::kCounter,
    "Prompt tokens of finished requests."};
inline constexpr MetricSpec kGenerationTokens = {
    "pdserve_frontend_generation_tokens_total", MetricType::kCounter,
    "Tokens generated and streamed to clients."};
inline constexpr MetricSpec kWriteStalls = {
    "pdserve_frontend_stream_write_stalls_total", MetricType::kCounter,
    "Stream writes that blocked on a slow client (flow control)."};
inline constexpr MetricSpec kRouted = {
    "pdserve_frontend_routed_requests_total", MetricType::kCounter,
    "Scheduler submissions (first and resubmitted) by why the cell was "
    "chosen: prefix (affinity), spilled (affinity cell too loaded), "
    "least_loaded, none_ready."};
inline constexpr MetricSpec kResubmissions = {
    "pdserve_frontend_resubmitted_requests_total", MetricType::kCounter,
    "Streams resubmitted with their tokens so far after the scheduler call "
    "broke (the scheduler died); counted once per loss."};
inline constexpr MetricSpec kWriteStallTime = {
    "pdserve_frontend_stream_write_stall_seconds", MetricType::kHistogram,
    "Time a stalled stream write waited for the client."};
inline constexpr MetricSpec kTokenizerTime = {
    "pdserve_frontend_tokenizer_seconds", MetricType::kHistogram,
    "Time spent tokenizing (op=encode) or detokenizing (op=decode) one "
    "request."};

// ---- compatibility with vLLM-aware routers and autoscalers ----
inline constexpr MetricSpec kVllmWaiting = {
    "vllm:num_requests_waiting", MetricType::kGauge,
    "vLLM-compatible: requests waiting (same as "
    "pdserve_scheduler_requests_waiting)."};
inline constexpr MetricSpec kVllmRunning = {
    "vllm:num_requests_running", MetricType::kGauge,
    "vLLM-compatible: requests running (same as "
    "pdserve_scheduler_requests_running)."};
inline constexpr MetricSpec kVllmKvUsage = {
    "vllm:kv_cache_usage_perc", MetricType::kGauge,
    "vLLM-compatible: KV cache usage as a fraction 0..1 (the engine's "
    "pdserve_engine_kv_usage_ratio; a scheduler's: its KV ledger's pages "
    "in use, cached prefix pages counted free)."};

// Every spec above, for tests and documentation.
inline constexpr const MetricSpec* kAllMetrics[] = {&kBuildInfo,
                                                    &kReady,
                                                    &kStartTime,
                                                    &kStepDuration,
                                                    &kEngineTokens,
                                                    &kBatchSize,
                                                    &kMemoryBytes,
                                                    &kBandwidthGauge,
                                                    &kBandwidthHistogram,
                                                    &kBandwidthRatio,
                                                    &kPeakBandwidth,
                                                    &kFlopsGauge,
                                                    &kFlopTotal,
                                                    &kPeakFlops,
                                                    &kKvCapacityTokens,
                                                    &kKvUsedTokens,
                                                    &kKvFreeTokens,
                                                    &kKvCapacityPages,
                                                    &kKvUsedPages,
                                                    &kKvFreePages,
                                                    &kKvPageSize,
                                                    &kKvCapacityBytes,
                                                    &kKvUsage,
                                                    &kActiveSequences,
                                                    &kMaxSequences,
                                                    &kEnginePreemptions,
                                                    &kPrefixQueryTokens,
                                                    &kPrefixHitTokens,
                                                    &kKvCachedPages,
                                                    &kLinearSlotsTotal,
                                                    &kLinearSlotsUsed,
                                                    &kWaiting,
                                                    &kRunning,
                                                    &kAdmissions,
                                                    &kRejections,
                                                    &kCancellations,
                                                    &kSchedPreemptions,
                                                    &kFinished,
                                                    &kIterations,
                                                    &kPlannedTokens,
                                                    &kTokenBudget,
                                                    &kEngineLosses,
                                                    &kResumedRequests,
                                                    &kRecomputedTokens,
                                                    &kUnrecovered,
                                                    &kRecoveryTime,
                                                    &kHandoffs,
                                                    &kHandoffTime,
                                                    &kHandoffBytes,
                                                    &kRequests,
                                                    &kHttpRequests,
                                                    &kInFlight,
                                                    &kFinishReasons,
                                                    &kTtft,
                                                    &kItl,
                                                    &kE2e,
                                                    &kQueueTime,
                                                    &kPrefillTime,
                                                    &kDecodeTime,
                                                    &kPromptTokens,
                                                    &kGenerationTokens,
                                                    &kWriteStalls,
                                                    &kResubmissions,
                                                    &kRouted,
                                                    &kWriteStallTime,
                                                    &kTokenizerTime,
                                                    &kVllmWaiting,
                                                    &kVllmRunning,
                                                    &kVllmKvUsage};

}  // namespace pdserve::metrics

#endif  // PDSERVE_COMMON_METRICS_METRIC_NAMES_H_
