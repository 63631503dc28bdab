// EngineCore's private parts: one sequence's record and the Impl class,
// shared by engine_core.cc (admission, steps, sampling) and
// engine_core_handoff.cc (prefill/decode hand-off). Not a public header.
#ifndef PDSERVE_ENGINE_CORE_ENGINE_CORE_IMPL_H_
#define PDSERVE_ENGINE_CORE_ENGINE_CORE_IMPL_H_

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/backend/backend_loader.h"
#include "engine/backend/forward_backend.h"
#include "engine/core/engine_core.h"
#include "engine/core/image_cache.h"
#include "engine/core/sequence_guide.h"
#include "engine/kv/sequence_state.h"
#include "engine/model/forward.h"
#include "engine/model/sampler.h"
#include "kernels/thread_pool.h"

namespace pdserve {

// The default EngineOptions::now_ns.
inline int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One live or finished sequence.
struct EngineSequence {
  SequenceId id = 0;
  // Prompt followed by every sampled token; the token at position p is
  // tokens[p]. Reserved at admission (max_seq_len + 1): appending a sampled
  // token never allocates.
  std::vector<int32_t> tokens;
  int64_t prompt_len = 0;
  SequenceState state;
  std::unique_ptr<Sampler> sampler;
  // Grammar / reasoning control (null when the sampling has neither), and
  // the mask it gives this step's sample.
  std::unique_ptr<SequenceGuide> guide;
  SequenceGuide::Mode guide_mode = SequenceGuide::Mode::kFree;
  std::vector<int32_t> stop_ids;
  int64_t max_new_tokens = 0;
  int64_t generated = 0;
  FinishReason finish = FinishReason::kNone;
  int64_t plan_stamp = -1;   // last step that listed it (duplicates)
  int64_t logits_step = -1;  // step whose logits row it owns
  int64_t logits_row = -1;
  // No penalties, bias or top logprobs: a device backend may sample it
  // (DeviceSamplingParams).
  bool device_samplable = false;
  DeviceSamplingParams device_params;

  // Vision-language prompts: each image's content hash and grid, and
  // either its cached embedding or its decoded pixels (until encoded); the
  // prompt's mRoPE positions [prompt_len][3]; and, from the first span that
  // reaches a placeholder, every image's embedding in prompt order. All
  // released once the prompt is processed.
  struct PromptImage {
    std::string hash;
    ImageGrid grid;
    ImageEmbeddingCache::Embeddings embedding;
    RgbImage pixels;
  };
  std::vector<PromptImage> images;
  std::vector<int64_t> mrope_positions;
  std::vector<float> image_embeds;
  bool has_images() const { return !images.empty(); }
  bool multimodal = false;  // admitted with images (kept after release)

  // Prompt tokens taken from the prefix cache that plans still count as
  // pending: the next plan entries consume them without compute.
  int64_t cached_skip = 0;
  bool export_kv = false;  // leave a KvHandoff when the length ends it

  explicit EngineSequence(SequenceState s) : state(std::move(s)) {}
  // Tokens available to process (prompt, or the pending sampled token).
  int64_t available() const {
    return static_cast<int64_t>(tokens.size()) - state.next_pos();
  }
  // Tokens a plan may give it (the cached ones included).
  int64_t pending() const { return available() + cached_skip; }
};

class EngineCore::Impl {
 public:
  Impl(std::shared_ptr<const ModelWeights> weights, ThreadPool* threads,
       EngineOptions options, std::unique_ptr<KvPool> pool)
      : weights_(std::move(weights)),
        threads_(threads),
        options_(std::move(options)),
        pool_(std::move(pool)),
        vocab_(weights_->config.vocab_size),
        max_rows_(std::min(options_.max_sequences, options_.max_step_tokens)),
        logits_(new float[static_cast<size_t>(max_rows_ * vocab_)]),
        image_cache_(options_.image_cache_bytes) {
    seqs_.reserve(static_cast<size_t>(2 * options_.max_sequences));
    spans_.reserve(static_cast<size_t>(max_rows_));
    span_seq_.reserve(static_cast<size_t>(max_rows_));
    if (!options_.now_ns) options_.now_ns = SteadyNowNs;
    scratch_.resize(static_cast<size_t>(threads_->num_threads()));
    for (SamplerScratch& sc : scratch_)
      sc.Reserve(static_cast<int32_t>(vocab_));
    to_sample_.reserve(static_cast<size_t>(max_rows_));
    sampled_.resize(static_cast<size_t>(max_rows_));
    device_params_.resize(static_cast<size_t>(max_rows_));
    device_tokens_.resize(static_cast<size_t>(max_rows_));
    mask_jobs_.reserve(static_cast<size_t>(max_rows_));
  }

  absl::Status Init() {
    BackendOptions bo;
    bo.max_batch_tokens = options_.max_step_tokens;
    bo.plugin_path = options_.backend_plugin_path;
    absl::StatusOr<std::unique_ptr<ForwardBackend>> backend =
        CreateForwardBackend(*weights_, *pool_, *threads_, options_.device, bo);
    if (!backend.ok()) return backend.status();
    backend_ = std::move(*backend);
    description_ = backend_->Describe();
    return absl::OkStatus();
  }

  absl::Status AddSequence(SequenceId id, absl::Span<const int32_t> prompt,
                           int64_t max_seq_len, const SamplingParams& params,
                           absl::Span<const int32_t> stop_token_ids,
                           int64_t max_new_tokens, const LedgerPages* ledger,
                           int64_t resumed_outputs,
                           absl::Span<const SequenceImage> images);
  absl::Status AssignPages(SequenceId id, absl::Span<const int32_t> pages) {
    if (!seqs_.contains(id)) {
      return absl::NotFoundError(absl::StrCat("unknown sequence ", id));
    }
    // A sequence that finished already gave its pages back; the ledger
    // learns of the finish from this step's result and frees these too.
    if (!pool_->Contains(id)) return absl::OkStatus();
    return pool_->AssignPages(id, pages);
  }
  absl::Status Step(absl::Span<const StepPlanEntry> plan, StepResult* result);
  absl::Status Release(SequenceId id);
  EngineStats Stats() const;
  int64_t CachedPrefixTokens(SequenceId id) const {
    auto it = seqs_.find(id);
    return it == seqs_.end() ? 0 : it->second->cached_skip;
  }
  int64_t ResidentBytes() const { return pool_->ResidentBytes(); }
  absl::Span<const float> LastLogits(SequenceId id) const;
  absl::Status MarkForExport(SequenceId id);
  std::vector<std::pair<SequenceId, KvHandoff>> TakeExports() {
    return std::exchange(exports_, {});
  }
  absl::Status ImportKv(SequenceId id, const KvHandoff& handoff,
                        const std::string& model);
  KvHandoffShape HandoffShape() const { return pool_->HandoffShape(); }

  const KvGeometry& geometry() const { return pool_->geometry(); }
  int64_t max_seq_len() const { return options_.max_seq_len; }
  bool prefix_cache_enabled() const { return pool_->prefix_cache_enabled(); }
  const ModelConfig& config() const { return weights_->config; }
  const DeviceSpec& device() const { return options_.device; }
  const std::string& description() const { return description_; }
  absl::StatusOr<double> MeasureReadBandwidth(int64_t buffer_bytes) {
    return backend_->MeasureReadBandwidth(buffer_bytes);
  }

 private:
  // Runs the staged spans: RunAndSample when *on_device, else Run into
  // logits_. A backend answering UNIMPLEMENTED (it cannot sample this step)
  // gets Run instead, and *on_device turns false.
  absl::Status Forward(bool* on_device, ForwardStats* stats);
  absl::Status ValidatePlan(absl::Span<const StepPlanEntry> plan);
  // With a prefix cache: gives `seq` (just added to the pool) the cached
  // pages of its prompt's longest cached prefix and advances it past them.
  absl::Status AttachCachedPrefix(EngineSequence& seq);
  absl::Status AssignLedgerPages(EngineSequence& seq, const LedgerPages& ledger);
  // Samples every sequence in to_sample_ into sampled_, on all threads.
  void SampleAll();
  // Records a sampled token and applies the stop / length rules.
  void Apply(EngineSequence& seq, const SampledToken& sampled,
             SequenceStepResult& out);
  void Finish(EngineSequence& seq, FinishReason reason);
  // MarkForExport's snapshot of `seq` (its KV still in the pool).
  void ExportFinished(const EngineSequence& seq);
  // engine_core_images.cc. AddSequence's image part: checks, decodes (or
  // finds in the cache) and keeps `images`, and the prompt's positions.
  absl::Status PrepareImages(EngineSequence& seq,
                             absl::Span<const SequenceImage> images);
  // Sets span's mrope_positions and image embeddings for prompt tokens
  // [start, end) of `seq`, encoding its images first if none is yet;
  // adds the encoder's time to encode_ns_.
  absl::Status ImageSpan(EngineSequence& seq, int64_t start, int64_t end,
                         SequenceSpan& span);
  // Frees `seq`'s image data once its prompt is processed.
  static void ReleaseImages(EngineSequence& seq);

  std::vector<std::pair<SequenceId, KvHandoff>> exports_;
  std::shared_ptr<const ModelWeights> weights_;
  ThreadPool* threads_;
  EngineOptions options_;
  std::unique_ptr<KvPool> pool_;
  std::unique_ptr<ForwardBackend> backend_;
  std::string description_;
  const int64_t vocab_;
  const int64_t max_rows_;  // logits rows: spans in one step
  std::unique_ptr<float[]> logits_;
  std::vector<SamplerScratch> scratch_;  // one per thread
  struct SampleItem {
    int32_t span;        // index into spans_ (and logits rows)
    int32_t plan_index;  // index into the plan / result
  };
  std::vector<SampleItem> to_sample_;
  // Grammar masks of this step, filled by mask_worker_ (started at the first
  // guided sequence) while the forward pass runs.
  std::vector<SequenceGuide*> mask_jobs_;
  std::unique_ptr<MaskWorker> mask_worker_;
  std::vector<absl::StatusOr<SampledToken>> sampled_;
  // Device sampling staging, one per span (capacity max_rows_).
  std::vector<DeviceSamplingParams> device_params_;
  std::vector<SampledToken> device_tokens_;
  bool last_step_on_device_ = false;  // LastLogits has no host row
  absl::flat_hash_map<SequenceId, std::unique_ptr<EngineSequence>> seqs_;
  // Step staging, capacity fixed at construction.
  std::vector<SequenceSpan> spans_;
  std::vector<EngineSequence*> span_seq_;
  int64_t steps_ = 0;  // Step calls validated (stamps)
  int64_t forward_steps_ = 0;
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
  ImageEmbeddingCache image_cache_;
  int64_t images_ = 0;            // admitted with sequences
  int64_t image_cache_hits_ = 0;  // of those, found in image_cache_
  int64_t encode_ns_ = 0;         // this Step's encoder time
  int64_t step_images_encoded_ = 0;
  int64_t tokens_processed_ = 0;
  int64_t running_ = 0;
  int64_t finished_ = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_CORE_ENGINE_CORE_IMPL_H_
