// KV capacity pool: geometry from a memory budget, an O(1) page allocator,
// per-sequence page tables and linear-attention state slots.
//
// Physical memory follows the tokens really written: the KV storage is one
// anonymous MAP_NORESERVE mapping, so untouched pages cost nothing, and a
// page is returned to the operating system (madvise MADV_DONTNEED) the
// moment its sequence is released.
#ifndef PDSERVE_ENGINE_KV_KV_POOL_H_
#define PDSERVE_ENGINE_KV_KV_POOL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/kv/kv_handoff.h"
#include "engine/kv/kv_storage.h"
#include "engine/kv/page_allocator.h"
#include "engine/kv/prefix_cache.h"
#include "engine/kv/sequence_id.h"
#include "engine/model_config.h"

namespace pdserve {

// What the pool must store per token and per sequence, derived from the
// model. Counts are elements (f32); zero linear-attention sizes mean a dense
// model (Llama, Qwen3) with no per-sequence recurrent state.
struct KvModelShape {
  int64_t num_attention_layers = 0;    // layers with a KV cache
  int64_t kv_dim = 0;                  // num_kv_heads * head_dim
  int64_t head_dim = 0;                // 0: kv_dim (one head)
  int64_t max_context = 0;             // the model's trained context length
  int64_t num_linear_layers = 0;       // linear-attention (e.g. Gated DeltaNet)
  int64_t conv_state_floats = 0;       // per linear layer, per sequence
  int64_t recurrent_state_floats = 0;  // per linear layer, per sequence

  static KvModelShape FromConfig(const ModelConfig& config);
};

// The memory budget of a pool: either `bytes` (> 0) or `fraction` (0, 1] of
// the memory available when the pool is created. Exactly one must be set.
struct KvMemoryBudget {
  int64_t bytes = 0;
  double fraction = 0.0;
};

// Pool geometry, a plain value reported to callers (engine info, metrics).
// Byte counts are for keys and values stored as `dtype`.
struct KvGeometry {
  int64_t num_layers = 0;  // attention layers
  int64_t kv_dim = 0;
  int64_t head_dim = 0;    // elements per kv head
  KvDType dtype = KvDType::kF32;
  int64_t page_size = 0;                  // tokens per page
  int64_t bytes_per_token_per_layer = 0;  // key + value
  int64_t bytes_per_token = 0;            // all layers
  int64_t bytes_per_page = 0;             // page stride (OS-page aligned)
  int64_t num_pages = 0;
  int64_t total_tokens = 0;                     // num_pages * page_size
  int64_t max_sequences = 0;                    // sequences admitted at once
  int64_t linear_state_bytes_per_sequence = 0;  // 0 for dense models
  int64_t budget_bytes = 0;                     // the resolved budget
  int64_t max_context = 0;                      // model context length
  // Back the keys and values with transparent huge pages (KvStorage::
  // Create); a memory policy, not a shape: ComputeKvGeometry leaves it off.
  bool huge_pages = false;
};

// Parses the "MemAvailable:  N kB" line of /proc/meminfo text into bytes.
// INVALID_ARGUMENT when the line is missing or malformed.
absl::StatusOr<int64_t> ParseMemAvailable(absl::string_view meminfo);

// Reads /proc/meminfo (the default source of free memory on the CPU).
absl::StatusOr<int64_t> ReadMemAvailableBytes();

// Computes the geometry for keys and values stored as `dtype`. Pure:
// `available_bytes` is consulted only for a fractional budget (inject a fake
// in tests). Linear-attention state slots
// for `max_sequences` are paid out of the budget first; the rest is KV pages.
// Errors (INVALID_ARGUMENT / RESOURCE_EXHAUSTED) name the numbers: bad
// shape, page_size <= 0, budget not set or both set, fraction outside
// (0, 1], a budget too small for one page, a dtype the head dimension does
// not fit (CheckKvDType).
absl::StatusOr<KvGeometry> ComputeKvGeometry(
    const KvModelShape& shape, const KvMemoryBudget& budget, int64_t page_size,
    int64_t max_sequences,
    const std::function<absl::StatusOr<int64_t>()>& available_bytes,
    KvDType dtype = KvDType::kF32);

// Counters of a pool (for Stats and metrics).
struct KvPoolStats {
  int64_t total_pages = 0;
  int64_t used_pages = 0;
  int64_t free_pages = 0;
  int64_t total_tokens = 0;       // capacity in tokens (pages * page_size)
  int64_t used_tokens = 0;        // tokens written by live sequences
  int64_t free_tokens = 0;        // free_pages * page_size
  int64_t sequences = 0;          // live sequences
  int64_t linear_slots_used = 0;  // == sequences for hybrid models, else 0
  int64_t cached_pages = 0;       // free pages the prefix cache still holds
  int64_t used_bytes = 0;         // used pages * bytes_per_page + state slots
};

// Where a pool's keys, values and linear states live.
enum class KvPoolMemory {
  kHost,            // in the pool's own mappings (the CPU backend)
  kAccountingOnly,  // elsewhere (a device backend owns them): the pool maps
                    // nothing and only accounts pages and state slots
};

// The KV capacity pool. Owns the storage (an anonymous mapping, kHost only),
// the page allocator, one page table and one linear-state slot per live
// sequence.
// Pages are taken by Reserve() as a sequence grows and all returned by
// Remove(). Thread-compatible: one caller at a time (the engine's step
// thread).
class KvPool {
 public:
  // Maps the storage for `geometry` (which must come from
  // ComputeKvGeometry) unless `memory` is kAccountingOnly. With
  // `prefix_cache`, full pages are indexed by content (PrefixCache) and kept
  // when released, for AttachPrefix; INVALID_ARGUMENT for a model with
  // linear-attention state (a recurrent state cannot be resumed mid-prompt).
  // RESOURCE_EXHAUSTED when the mapping fails.
  static absl::StatusOr<std::unique_ptr<KvPool>> Create(
      const KvGeometry& geometry, KvPoolMemory memory = KvPoolMemory::kHost,
      bool prefix_cache = false);
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  const KvGeometry& geometry() const { return geometry_; }
  // The host storage; only for kHost pools with pages (has_storage()).
  bool has_storage() const { return storage_ != nullptr; }
  KvStorage& storage() { return *storage_; }
  const KvStorage& storage() const { return *storage_; }

  // Admits `id` with no pages yet; `max_tokens` (its capacity) sizes the
  // page table once so that growing it later never allocates.
  // ALREADY_EXISTS for a live id, RESOURCE_EXHAUSTED when max_sequences are
  // live, INVALID_ARGUMENT when max_tokens is not in [1, total_tokens].
  absl::Status Add(SequenceId id, int64_t max_tokens);
  // Ensures `id` has pages for positions [0, num_tokens). Allocates only the
  // missing pages; all-or-nothing: RESOURCE_EXHAUSTED (pages needed, free)
  // leaves the table unchanged. NOT_FOUND for an unknown id.
  absl::Status Reserve(SequenceId id, int64_t num_tokens);
  // Records that positions [0, num_tokens) of `id` hold data (for used_tokens
  // accounting); num_tokens must be covered by its pages.
  absl::Status MarkWritten(SequenceId id, int64_t num_tokens);
  // Drops `id`'s reference to each of its pages and frees its state slot. A
  // page nobody else holds is returned to the OS at once, unless the prefix
  // cache indexes it (then it stays, counted as free, until reclaimed).
  absl::Status Remove(SequenceId id);

  // Pages chosen by the scheduler's KvLedger (kv_ledger.h). The sequence
  // then takes no page by itself: Reserve fails (FAILED_PRECONDITION)
  // rather than allocate. AssignPages appends `pages` to the table of `id`;
  // all-or-nothing: FAILED_PRECONDITION naming the page when one is out of
  // range, in use, or listed twice; INVALID_ARGUMENT past the sequence's
  // capacity; NOT_FOUND for an unknown id.
  absl::Status AssignPages(SequenceId id, absl::Span<const int32_t> pages);
  // Gives `id` (just added, no pages) the shared prefix `pages`, each of
  // which must hold the matching page of `tokens` after the page before it,
  // as written and indexed here and not handed out since
  // (FAILED_PRECONDITION naming the page otherwise), and marks them
  // written; returns the tokens covered. Marks `id` as ledger-driven, with
  // only its first `index_tokens` tokens indexed by IndexWritten (the
  // ledger's rule).
  absl::StatusOr<int64_t> AssignPrefix(SequenceId id,
                                       absl::Span<const int32_t> tokens,
                                       absl::Span<const int32_t> pages,
                                       int64_t index_tokens);

  bool prefix_cache_enabled() const { return prefix_ != nullptr; }
  // Prefix cache: gives `id` (just added, no pages yet) the cached pages
  // holding the longest indexed prefix of `tokens`, at most `max_pages`
  // pages, and marks them written. Returns the tokens covered (a multiple
  // of page_size; 0 without a prefix cache).
  absl::StatusOr<int64_t> AttachPrefix(SequenceId id,
                                       absl::Span<const int32_t> tokens,
                                       int64_t max_pages);
  // Prefix cache: indexes every full page of `id` written so far whose
  // tokens (positions of `tokens`, the sequence's token list) are known.
  // No-op without a prefix cache.
  void IndexWritten(SequenceId id, absl::Span<const int32_t> tokens);

  bool Contains(SequenceId id) const { return seqs_.contains(id); }
  // The page table of `id` (page i holds positions [i*page_size, ...)), or
  // an empty span for an unknown id. Valid until the next mutation of `id`.
  absl::Span<const int32_t> PageTable(SequenceId id) const;
  // Pages needed to extend `id` (or a new sequence when unknown) to
  // `num_tokens` positions.
  int64_t PagesNeeded(SequenceId id, int64_t num_tokens) const;
  // Conv + recurrent state of `id` (linear_state_bytes_per_sequence / 4
  // floats, zeroed at Add), or nullptr for dense models / unknown ids /
  // kAccountingOnly pools.
  float* LinearState(SequenceId id);
  // The linear-state slot of `id`, in [0, max_sequences) (the index device
  // backends keep their copy of the state under, SequenceSpan::state_slot),
  // or -1 for dense models / unknown ids. Stable while `id` is live.
  int32_t StateSlot(SequenceId id) const;

  // Prefill/decode hand-off (kv_handoff.h), kHost pools only
  // (FAILED_PRECONDITION otherwise). HandoffShape: the layout of what
  // ExportPages writes. ExportPages appends the pages holding positions
  // [0, num_tokens) of `id` (whole pages, shape.page_bytes each) to `kv`
  // and its linear-attention state to `linear_state`. ImportPages writes
  // them into `id` (just added, nothing written): pages first taken as
  // Reserve does (a ledger sequence must already hold them), then marked
  // written. NOT_FOUND for an unknown id; INVALID_ARGUMENT for sizes that
  // do not match.
  KvHandoffShape HandoffShape() const;
  absl::Status ExportPages(SequenceId id, int64_t num_tokens, std::string* kv,
                           std::string* linear_state) const;
  absl::Status ImportPages(SequenceId id, int64_t num_tokens,
                           absl::string_view kv,
                           absl::string_view linear_state);

  KvPoolStats Stats() const;
  // Bytes of the pool's mappings resident in physical memory, measured with
  // mincore(2) (a system call; not for the step hot path).
  int64_t ResidentBytes() const;

 private:
  struct Sequence {
    std::vector<int32_t> pages;
    int64_t written = 0;
    int32_t slot = -1;          // linear-state slot, -1 when none
    int64_t indexed_pages = 0;  // leading pages IndexWritten has handled
    int64_t max_pages = 0;      // the capacity (Add's max_tokens) in pages
    bool ledger = false;        // pages come from AssignPages only
    int64_t index_tokens = -1;  // tokens IndexWritten may index; -1 = all
  };
  KvPool(const KvGeometry& geometry, std::unique_ptr<KvStorage> storage,
         float* linear_state);
  bool has_linear_state() const {
    return geometry_.linear_state_bytes_per_sequence > 0;
  }

  float* LinearStateOfSlot(int32_t slot);
  static absl::StatusOr<std::unique_ptr<KvPool>> CreateMapped(
      const KvGeometry& geometry, KvPoolMemory memory);

  KvGeometry geometry_;
  std::unique_ptr<KvStorage> storage_;
  float* linear_state_ = nullptr;  // [max_sequences][floats per sequence]
  size_t linear_state_bytes_ = 0;  // mapping length
  PageAllocator pages_;
  std::vector<int32_t> free_slots_;
  std::unique_ptr<PrefixCache> prefix_;  // null when disabled
  // What each fully written, indexed page holds: its tokens, the page
  // before it (-1 for a first page) and whether that is still so (cleared
  // when the page is handed out again). AssignPrefix checks claims with it.
  std::vector<int32_t> page_tokens_;  // [page][page_size]
  std::vector<int32_t> page_parent_;
  std::vector<uint8_t> page_known_;
  absl::flat_hash_map<SequenceId, Sequence> seqs_;
  int64_t used_tokens_ = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_KV_KV_POOL_H_
