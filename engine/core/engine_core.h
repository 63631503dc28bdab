// EngineCore: the engine's step executor, the API the gRPC engine service
// wraps. It owns the KV capacity pool and the per-sequence state (validity
// mask / next_pos, sampler, stop conditions) and executes a step plan as ONE
// batched forward pass followed by per-sequence sampling.
//
// Sequence life cycle (capacity semantics, see ../shared/DESIGN.md, "Fixed-
// shape KV capacity contract"):
//   AddSequence(id, prompt, max_seq_len, ...)   prompt sent once; validated
//   Step({id, k}) ...                           prefill chunks of k prompt
//                                               tokens from next_pos
//   -> the step whose chunk reaches the end of the prompt samples the first
//      new token;
//   Step({id, 1}) ...                           decode: feeds the last
//                                               sampled token, samples one
//   -> finished: `stop` when the sampled token is a stop id; `length` when
//      max_new_tokens were generated or the KV capacity (max_seq_len
//      positions) is full, so the sampled token could not be fed back.
//      A sequence therefore yields at most max_seq_len - prompt_len + 1
//      tokens.
//      A finished sequence's KV pages return to the pool at that moment;
//      its record stays (a plan naming it reports the finish) until
//   Release(id)                                 forgets it; for a running
//                                               sequence (cancel) its pages
//                                               are freed at once.
#ifndef PDSERVE_ENGINE_CORE_ENGINE_CORE_H_
#define PDSERVE_ENGINE_CORE_ENGINE_CORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "absl/strings/string_view.h"
#include "engine/backend/device_spec.h"
#include "engine/image/image_preprocess.h"
#include "engine/kv/kv_handoff.h"
#include "engine/kv/kv_pool.h"
#include "engine/model/sampler.h"
#include "engine/model_weights.h"

namespace pdserve {

class ThreadPool;       // kernels/thread_pool.h

// Engine construction options.
struct EngineOptions {
  // --kv-memory: bytes or a fraction of available memory (for a device
  // backend: of the device's free memory less the model's weight bytes);
  // when neither is set (the default) half of it.
  KvMemoryBudget kv_memory;
  // --device: where the forward pass runs. cuda loads the CUDA plugin
  // (engine/backend/backend_loader.h); the KV pool's capacity accounting
  // stays on the host, its keys/values live on the device.
  DeviceSpec device;
  // The device plugin file to load instead of searching (tests); empty =
  // the loader's search list.
  std::string backend_plugin_path;
  // The capacity of one sequence in tokens (--max-seq-len): 0 = the model's
  // context length capped by the pool's tokens (ResolveMaxSeqLen); Create
  // refuses more than either. max_seq_len() reports the result.
  int64_t max_seq_len = 0;
  // --kv-dtype: how keys and values are stored; unset = bf16 (CPU and
  // device). A device backend takes bf16 or f32 only; Create refuses others.
  std::optional<KvDType> kv_dtype;
  int64_t page_size = 16;          // tokens per KV page
  // Transparent huge pages for the host KV cache (KvGeometry::huge_pages,
  // --kv-huge-pages): faster attention over long contexts, but a released
  // page's memory then goes back to the OS only with its whole 2 MiB page.
  bool kv_huge_pages = false;
  int64_t max_sequences = 256;     // sequences live at once
  int64_t max_step_tokens = 2048;  // tokens one Step may process in total
  // Automatic prefix caching (KvPool, PrefixCache): a new sequence starts
  // from the cached pages of the longest full-page prefix of its prompt that
  // an earlier sequence wrote, keeping at least its last prompt token to
  // compute. Plans are unchanged: a prefill chunk over cached tokens only
  // advances, without compute. Used for dense models on the CPU; ignored for
  // hybrid models (a recurrent state cannot resume mid-prompt) and for
  // device backends (not yet verified there).
  bool prefix_cache = false;
  // Monotonic clock for step timings, in nanoseconds; defaults to
  // std::chrono::steady_clock. Inject a fake for deterministic tests.
  std::function<int64_t()> now_ns;
  // Images (vision-language models): the most pixels an image may decode
  // to (a guard against decompression bombs; the front end's limit is the
  // user-facing one), and the byte budget of the cache of encoder outputs
  // by image content (ImageEmbeddingCache).
  int64_t max_image_pixels = int64_t{1} << 26;
  int64_t image_cache_bytes = int64_t{256} << 20;
  // Available memory for a fractional budget; defaults to /proc/meminfo for
  // the CPU and the plugin's free device memory for a device.
  std::function<absl::StatusOr<int64_t>()> available_bytes;
};

// One image of a sequence's prompt (vision-language models: the model's
// config.vision is present). Views; read during AddSequence only.
struct SequenceImage {
  absl::string_view bytes;  // the encoded file: PNG, JPEG or WebP
  // The patch grid the prompt's placeholder tokens were sized for (the
  // front end's GridForImage of the same file); AddSequence checks it.
  ImageGrid grid;
};

// The scheduler's KvLedger choices for one admission (engine/kv/kv_ledger.h):
// the sequence then takes only the pages the plans give it.
struct LedgerPages {
  // The shared cached prefix: the pool's own index must hold exactly these
  // pages for the prompt's first tokens (KvPool::AssignPrefix).
  absl::Span<const int32_t> prefix_pages;
  absl::Span<const int32_t> pages;  // its next pages, in position order
  int64_t index_tokens = 0;         // leading prompt tokens the ledger indexes
};

// One entry of a step plan: process `num_tokens` tokens of sequence `id`.
// While the prompt is not fully processed this is a prefill chunk of the
// next num_tokens prompt tokens (from next_pos); afterwards it must be 1, a
// decode step feeding the last sampled token.
struct StepPlanEntry {
  SequenceId id = 0;
  int32_t num_tokens = 0;
};

enum class FinishReason : int32_t {
  kNone = 0,    // still running
  kStop = 1,    // sampled a stop token (included in the output)
  kLength = 2,  // max_new_tokens reached or KV capacity full
};

const char* FinishReasonName(FinishReason reason);  // "none" "stop" "length"

// Outcome of one plan entry, in plan order.
struct SequenceStepResult {
  SequenceId id = 0;
  int32_t tokens_processed = 0;  // tokens written to the KV cache this step
  bool has_token = false;        // a new token was sampled
  int32_t token = -1;            // valid when has_token
  float logprob = 0.0f;          // log p(token) under the model's
                                 // distribution (log-softmax of the raw
                                 // logits, before penalties/temperature)
  // With has_token and the sequence's SamplingParams::top_logprobs = k > 0:
  // the k most likely tokens of that step (SampledToken::top).
  int32_t num_top = 0;
  std::array<TokenLogprob, kMaxTopLogprobs> top;
  FinishReason finish = FinishReason::kNone;
  // Positions the plans have covered so far: those valid in its mask, less
  // cached prefix tokens (prefix_cache) that no plan entry has reached yet.
  int64_t next_pos = 0;
};

// Result of Step. Owned by the caller and reused across steps: Step clears
// and refills it without allocating once `sequences` has grown to the plan
// size.
struct StepResult {
  std::vector<SequenceStepResult> sequences;
  int64_t tokens_processed = 0;   // sum over sequences
  int64_t forward_ns = 0;         // the batched forward pass
  int64_t sample_ns = 0;          // sampling of all sequences
  int64_t total_ns = 0;           // whole Step call
  int64_t weight_bytes_read = 0;  // model weights read (once per step)
  int64_t kv_bytes_read = 0;      // keys and values attended over
  int64_t kv_bytes_written = 0;   // keys and values of the new tokens
  int64_t flops = 0;              // forward-pass FLOPs (multiply-add = 2)
  int64_t encode_ns = 0;          // the vision encoder (part of total_ns)
  int64_t images_encoded = 0;     // images run through the encoder
};

// Pool and sequence counters (Stats(); cheap, no system call).
struct EngineStats {
  KvPoolStats pool;
  int64_t running = 0;           // live, unfinished sequences
  int64_t finished = 0;          // finished, not yet released
  int64_t steps = 0;             // Step calls that ran a forward pass
  int64_t tokens_processed = 0;  // cumulative
  // Prefix cache, cumulative: prompt tokens admitted, and of those the ones
  // taken from cached pages instead of computed.
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  // Images, cumulative: admitted with a sequence, and of those taken from
  // the encoder-output cache instead of encoded.
  int64_t images = 0;
  int64_t image_cache_hits = 0;
};

// Thread-compatible: one call at a time (the engine's step thread). Buffers
// that keep their shape (activations, logits, token staging, sampler
// scratch) are allocated at Create and reused: Step does not allocate on the
// heap in steady state.
class EngineCore {
 public:
  // Shares ownership of `weights`; `threads` (not owned, must outlive the
  // core) runs the kernels and the sampling of every Step. Sizes the KV pool
  // from options.kv_memory, creates the backend for options.device and
  // allocates every per-step buffer. Errors name the numbers (budget,
  // geometry, max_step_tokens); for a device, FAILED_PRECONDITION names the
  // plugin paths tried or the device's error (no driver, no device).
  static absl::StatusOr<std::unique_ptr<EngineCore>> Create(
      std::shared_ptr<const ModelWeights> weights, ThreadPool* threads,
      EngineOptions options);
  ~EngineCore();
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  // Admits a sequence. Takes no KV pages yet (they follow the tokens).
  // Errors: ALREADY_EXISTS (live id); INVALID_ARGUMENT for an empty prompt,
  // a token id >= vocab size or < 0, max_seq_len <= 0 or above the model's
  // context length, the pool's total tokens or max_seq_len(), a prompt
  // longer than
  // max_seq_len, max_new_tokens <= 0, bad sampling parameters;
  // RESOURCE_EXHAUSTED when max_sequences are running or 2 * max_sequences
  // records (finished ones not yet released included) are held.
  // With `ledger` (not null), the sequence's pages are the scheduler's:
  // its prefix and first pages are assigned here (errors of
  // KvPool::AssignPrefix / AssignPages: FAILED_PRECONDITION naming the
  // page), later ones by AssignPages, and a step that needs a page it was
  // not given fails instead of taking one.
  // `resumed_outputs`: the last that many prompt tokens are ones this
  // request generated before it was restarted (resume by recompute after a
  // preemption or a lost engine). They count as outputs for the frequency
  // and presence penalties and are replayed through the grammar and the
  // reasoning budget, so the sequence continues as if never interrupted;
  // max_new_tokens counts only what is still to come. INVALID_ARGUMENT
  // unless 0 <= resumed_outputs < prompt.size(), or when the grammar
  // refuses a resumed token.
  // `images`: the prompt's images in order (vision-language models). Each
  // is decoded here (or found in the encoder-output cache by its content
  // hash) and checked against its grid; the prompt's placeholder tokens
  // (config.vision.image_token_id) must add up to the grids' token counts
  // (ComputeMropePositions), which also give the prompt's mRoPE positions
  // and the rope delta its generated tokens continue from. The encoder runs
  // in the first Step whose prefill chunk reaches an image's placeholders
  // (not at all when they come from a KV hand-off or the cache).
  // INVALID_ARGUMENT for a model without a vision tower, a file that does
  // not decode (naming the image and the decoder's message), more than
  // max_image_pixels, a grid other than the file's, placeholders that do not
  // match; FAILED_PRECONDITION when the backend has no vision encoder. Image
  // prompts neither use nor fill the KV prefix cache.
  absl::Status AddSequence(SequenceId id, absl::Span<const int32_t> prompt,
                           int64_t max_seq_len, const SamplingParams& params,
                           absl::Span<const int32_t> stop_token_ids,
                           int64_t max_new_tokens,
                           const LedgerPages* ledger = nullptr,
                           int64_t resumed_outputs = 0,
                           absl::Span<const SequenceImage> images = {});
  // Appends the scheduler's `pages` to the page table of `id` (a ledger
  // sequence's growth, before the step that writes them). NOT_FOUND for an
  // unknown id; KvPool::AssignPages' errors.
  absl::Status AssignPages(SequenceId id, absl::Span<const int32_t> pages);

  // Executes `plan` as one forward pass and samples: on the device when the
  // backend can (ForwardBackend::SamplesOnDevice) and no sequence sampling
  // in this step uses a penalty; otherwise from host logits. The plan is
  // validated before anything changes: an unknown id (NOT_FOUND), a duplicate
  // id, num_tokens <= 0, more tokens than are pending (past the end of the
  // prompt; more than 1 for a decode), or more than max_step_tokens in total
  // (INVALID_ARGUMENT); too few free KV pages (RESOURCE_EXHAUSTED naming
  // pages needed and free). In all these cases no sequence changed. An entry
  // for a finished sequence is reported (its finish reason, 0 tokens)
  // without running, so a decode step at full capacity never runs and no
  // other sequence is hurt. Results come in plan order.
  absl::Status Step(absl::Span<const StepPlanEntry> plan, StepResult* result);

  // Forgets `id` and frees its pages and state at once (finish or cancel).
  // NOT_FOUND for an unknown id.
  absl::Status Release(SequenceId id);
  // Prompt tokens of `id` taken from the prefix cache that plan entries have
  // not yet covered (all of them right after AddSequence); 0 when unknown.
  int64_t CachedPrefixTokens(SequenceId id) const;

  // Prefill/decode hand-off (engine/kv/kv_handoff.h), host KV only.
  // MarkForExport: when `id` ends with its length (the prefill's
  // max_new_tokens) it leaves a KvHandoff of its prompt's KV, its state and
  // a mask of max_seq_len() positions; TakeExports returns (and forgets)
  // those left since the last call. FAILED_PRECONDITION on a device
  // backend, NOT_FOUND for an unknown id.
  absl::Status MarkForExport(SequenceId id);
  std::vector<std::pair<SequenceId, KvHandoff>> TakeExports();
  // Starts `id` (just added, nothing computed or cached yet) from
  // `handoff`: ValidateHandoff against this engine (model `model`, its
  // layout, decode capacity max_seq_len()), then its tokens must be the
  // leading tokens of the prompt (at least one prompt token left to
  // compute); the KV and state are copied in and the positions count as
  // cached (CachedPrefixTokens: plans cover them without compute).
  absl::Status ImportKv(SequenceId id, const KvHandoff& handoff,
                        const std::string& model);
  // The layout this engine's hand-offs are in.
  KvHandoffShape HandoffShape() const;

  // The sequence capacity resolved at Create (EngineOptions::max_seq_len):
  // AddSequence refuses a larger max_seq_len.
  int64_t max_seq_len() const;
  // Whether the pool indexes prompt pages (EngineOptions::prefix_cache, for
  // a backend and model that support it).
  bool prefix_cache_enabled() const;
  const KvGeometry& Geometry() const;
  EngineStats Stats() const;
  // Bytes of the KV pool physically resident in memory, measured with
  // mincore(2): grows with the tokens written and falls when sequences end.
  // A system call over the whole mapping: for reports, not every step.
  int64_t ResidentBytes() const;
  const ModelConfig& model_config() const;
  // The device the forward pass runs on, and the backend's description
  // ("cpu", "cuda:0 NVIDIA H200 (sm_90)").
  const DeviceSpec& device() const;
  std::string Describe() const;
  // The backend's device memory read bandwidth in bytes/s, measured now
  // (ForwardBackend::MeasureReadBandwidth; buffer_bytes 0 = its choice).
  // UNIMPLEMENTED on the CPU. Not while Step runs: call before serving.
  absl::StatusOr<double> MeasureDeviceReadBandwidth(int64_t buffer_bytes);

  // The logits row (vocab_size floats) the last Step computed for `id`: for
  // the last token of its span, the row its new token (if any) was sampled
  // from. Empty when `id` was not run by the last Step. Valid until the next
  // Step. For tests and debugging. Empty as well when the last Step sampled
  // on the device (ForwardBackend::RunAndSample: no logits reach the host).
  absl::Span<const float> LastLogits(SequenceId id) const;

 private:
  class Impl;
  explicit EngineCore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_CORE_ENGINE_CORE_H_
