// The scheduling policy: a pure state machine (no IO, no clock, no threads)
// that turns queued requests and pool capacity into one step plan at a time.
// The gRPC shell (scheduler/scheduler_service.h) and the simulator
// (scheduler/simulator.h) drive the same code.
//
// Rules, applied by Plan() in this order:
//  1. Cancelled and finished sequences leave: their pages return to the pool
//     and the plan lists them for release in the engine before the step.
//  2. Running decodes first: every sequence past its prompt gets one token.
//     When their growth needs more KV pages than are free, running sequences
//     are preempted, lowest priority first and, within a priority, latest
//     arrival first, until the rest fit. A preempted sequence drops its KV
//     (released in the engine) and goes back to the head of its priority
//     class in the waiting queue; when readmitted its prompt is the original
//     prompt plus every token generated so far, recomputed by prefill
//     ("recompute" preemption, as in vLLM): no token is lost or repeated.
//  3. Prefill chunks fill the rest of the per-step token budget: sequences
//     already prefilling continue (at most `prefill_chunk` tokens each),
//     then waiting requests are admitted in order (priority, then FCFS) while
//     the pool can hold their whole prompt plus one decode token. Admission
//     is strict: a head-of-line request that does not fit blocks those
//     behind it, so large requests are not starved.
// With `prefill_chunk` 0 (chunking off) a prompt is prefilled in one step;
// it joins a step only when its whole prompt fits the remaining budget, or
// when the step would otherwise carry no prefill at all.
//
// Page accounting: one KV ledger (engine/kv/kv_ledger.h), owned here and
// followed by the engine: a sequence holding t tokens of KV uses
// ceil(t / page_size) pages; at admission it takes the pages of its whole
// (possibly recomputed) prompt, and the plan names them (StepPlan.admit_pages,
// PlanItem.pages) for the engine's pool to take. With the pool's prefix
// cache on (PoolGeometry::prefix_cache) and the prompt's tokens known
// (RequestSpec::prompt_tokens), an admission first looks up the longest
// cached full-page prefix of its prompt: those pages are shared, counted
// once however many sequences hold them, and their tokens ride in the first
// prefill item for free (PlanItem::cached_tokens).
#ifndef PDSERVE_SCHEDULER_POLICY_H_
#define PDSERVE_SCHEDULER_POLICY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/kv/kv_ledger.h"
#include "engine/kv/sequence_id.h"

namespace pdserve::scheduler {

// Knobs of the policy. Token counts are tokens; all must be > 0 except
// prefill_chunk (0 = chunking off).
struct PolicyConfig {
  int64_t step_token_budget = 512;  // decode + prefill tokens in one step
  int64_t prefill_chunk = 256;  // most prompt tokens of one sequence per step
  int64_t max_running = 64;     // most sequences admitted at once
  int64_t max_waiting = 1024;   // bound of the waiting queue
  // Hard cap on tokens in one step (the engine's max_step_tokens; 0 = none).
  // Unlike the budget it also splits a prompt when chunking is off.
  int64_t max_step_tokens = 0;
  // While a running prompt is being prefilled in chunks, waiting requests
  // (at the queue's head, in order, of at least its priority) whose whole
  // prompt fits in the step's budget left after decodes are admitted
  // before its next chunk: a short chat turn does not wait seconds behind a
  // long document. Never in two steps running, so the long prompt keeps at
  // least every other step. false: strict order (chunking on only).
  bool short_prompts_pass = true;
};

// The engine's KV pool as the policy sees it.
struct PoolGeometry {
  int64_t page_size = 16;   // tokens per page
  int64_t total_pages = 0;  // pages in the pool
  int64_t max_seq_len = 0;  // capacity of one sequence, tokens
  bool prefix_cache = false;  // the pool keeps prompt prefixes to share
};

// A request as submitted. Higher priority runs first.
struct RequestSpec {
  SequenceId id = 0;
  int32_t priority = 0;
  int64_t prompt_len = 0;      // tokens, > 0
  int64_t max_new_tokens = 0;  // > 0
  // The prompt's tokens, for the prefix lookup; empty = unknown (no lookup).
  // When given, prompt_len of them.
  std::vector<int32_t> prompt_tokens;
  // A request resumed after its engine was lost: it held its place before,
  // so the max_waiting bound does not refuse it.
  bool resumed = false;
  // Leading prompt tokens whose KV the engine takes from a prefill cell's
  // hand-off at this request's first admission (like a prefix-cache hit:
  // no budget, no compute; no prefix lookup then). < prompt_len.
  int64_t imported_tokens = 0;
};

// One sequence's share of a step.
struct PlanItem {
  SequenceId id = 0;
  int64_t num_tokens = 0;  // prompt tokens to prefill, or 1 for a decode
  bool prefill = false;
  bool completes_prompt = false;  // a token will be sampled after this item
  // Of num_tokens, the leading ones the engine holds from its prefix cache
  // (a shared prefix found at admission, or MarkPrefixCached): they cost no
  // budget and no compute.
  int64_t cached_tokens = 0;
  // KV pages the sequence takes before this item runs (the ledger's ids).
  std::vector<int32_t> pages;
};

// The ledger's pages of one admission: the shared prefix, the rest of its
// prompt's pages, and how many leading prompt tokens may be indexed.
struct AdmitPages {
  SequenceId id = 0;
  std::vector<int32_t> prefix_pages;
  std::vector<int32_t> pages;
  int64_t index_tokens = 0;
};

// What the shell does for one step, in this order: Release(release),
// AddSequence(admit) with each one's recomputed prompt, then Step(items).
struct StepPlan {
  std::vector<SequenceId>
      release;  // drop engine state (finished/cancelled/preempted)
  std::vector<SequenceId>
      cancelled;  // subset of release + waiting drops: end with CANCELLED
  std::vector<SequenceId> preempted;  // subset of release: back in the waiting queue
  std::vector<SequenceId> admit;      // add to the engine before the step
  std::vector<AdmitPages> admit_pages;  // parallel to admit
  std::vector<PlanItem> items;   // the batch of this step
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;
  // Attention work of the step: over every token computed, the KV
  // positions it attends to (a decode at context c: c + 1; a prefill chunk
  // of n tokens from position p: n*p + n*(n+1)/2). Cached tokens count none.
  int64_t attended_pairs = 0;
  bool empty() const { return items.empty() && release.empty(); }
};

// Engine outcome of one planned item.
struct ItemOutcome {
  SequenceId id = 0;
  bool finished = false;  // stop token, max_new_tokens or capacity reached
};

// Read-only view of a sequence's progress.
struct SequenceView {
  bool running = false;
  int32_t priority = 0;
  int64_t prompt_len = 0;  // original prompt
  int64_t generated = 0;   // tokens generated so far
  int64_t prefilled = 0;   // tokens of the current (recomputed) prompt in KV
  int64_t kv_tokens = 0;   // tokens held in KV
  int64_t pages = 0;       // pages held
  int64_t preemptions = 0;
};

// Not thread-safe: one owner drives Submit/Cancel/Plan/Commit.
class Policy {
 public:
  Policy(PolicyConfig config, PoolGeometry pool);

  // Queues a request. INVALID_ARGUMENT for bad numbers or a duplicate id,
  // RESOURCE_EXHAUSTED when the prompt exceeds the sequence capacity or the
  // pool, or when the waiting queue is full (naming its length).
  absl::Status Submit(const RequestSpec& request);

  // Marks a request cancelled; it leaves at the next Plan(). Returns false
  // when the id is unknown (already finished).
  bool Cancel(SequenceId id);

  // Records that the engine finished `id` (stop, length) after its plan was
  // committed: it leaves like a finished sequence (released at the next
  // Plan). No-op for an unknown or already finished id. For a shell that
  // commits plans optimistically before their outcomes arrive.
  void MarkFinished(SequenceId id);

  // Forgets a sequence without planning a release (the engine lost it).
  void Drop(SequenceId id);

  // Records that the engine admitted `id` with the first `tokens` tokens of
  // its current prompt already in KV (its prefix cache). The part not yet
  // planned joins the next prefill item of `id` for free: outside the token
  // budget and the chunk size (the engine skips their compute). At least
  // the prompt's last token is always planned as real work. No-op for an
  // unknown id or one not prefilling.
  void MarkPrefixCached(SequenceId id, int64_t tokens);

  // Builds the next step plan and remembers it for Commit().
  StepPlan Plan();

  // Applies the engine's outcome of the last plan. Items missing from
  // `outcomes` are taken as not finished.
  void Commit(absl::Span<const ItemOutcome> outcomes);

  // Pages that pages_for(tokens) needs.
  int64_t PagesFor(int64_t tokens) const;

  bool Contains(SequenceId id) const { return seqs_.contains(id); }
  SequenceView View(SequenceId id) const;  // zero view when unknown
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  // Running sequences past their prompt (each decodes one token a step).
  int64_t decoding() const;
  // KV tokens those decoding sequences hold (their next step's attention).
  int64_t decoding_kv_tokens() const;
  // Where the next prefill chunk starts: the KV position of the first
  // running sequence still prefilling, else 0 (an admission).
  int64_t next_prefill_position() const;
  int64_t total_pages() const { return pool_.total_pages; }
  int64_t free_pages() const { return ledger_.free_pages(); }
  // Free pages the prefix cache still holds (counted in free_pages()).
  int64_t cached_pages() const { return ledger_.cached_pages(); }
  // Pages `id` holds (empty when unknown), in position order.
  absl::Span<const int32_t> Pages(SequenceId id) const {
    return ledger_.Pages(id);
  }
  int64_t preemptions() const { return preemptions_; }
  bool idle() const { return seqs_.empty() && to_release_.empty(); }
  const PolicyConfig& config() const { return config_; }
  // Changes the per-step token budget from the next Plan() on (the shell
  // adapts it to measured step costs). Values < 1 become 1.
  void set_step_token_budget(int64_t budget) {
    config_.step_token_budget = budget < 1 ? 1 : budget;
  }
  const PoolGeometry& pool() const { return pool_; }

 private:
  struct Seq {
    RequestSpec spec;
    uint64_t arrival = 0;
    bool running = false;
    bool cancelled = false;
    int64_t generated = 0;
    int64_t target_prompt = 0;  // prompt to prefill (original + recomputed)
    int64_t prefilled = 0;
    int64_t cached = 0;  // prompt tokens past `prefilled` the engine holds
    int64_t kv_tokens = 0;
    int64_t pages = 0;
    int64_t preemptions = 0;
  };

  // Whether a ranks before b (priority desc, arrival asc).
  bool Before(const Seq& a, const Seq& b) const;
  void InsertWaiting(SequenceId id);
  void SortRunning();
  void Preempt(SequenceId id, StepPlan& plan);
  void ApplyCancellations(StepPlan& plan);
  void PlanDecodes(StepPlan& plan, int64_t& budget);
  void PlanPrefills(StepPlan& plan, int64_t& budget);
  // `passing`: only whole prompts that pass a running chunked prefill of
  // priority `passing->spec.priority` or lower (short_prompts_pass).
  void PlanAdmissions(StepPlan& plan, int64_t& budget,
                      const Seq* passing = nullptr);
  void PlanPassingAdmissions(StepPlan& plan, int64_t& budget);
  // Prefill tokens `s` may take now; 0 when it must wait.
  int64_t ChunkFor(const Seq& s, int64_t budget, const StepPlan& plan) const;
  void Finish(SequenceId id);
  void Forget(SequenceId id, bool written);

  PolicyConfig config_;
  PoolGeometry pool_;
  absl::flat_hash_map<SequenceId, Seq> seqs_;
  std::vector<SequenceId> waiting_;     // in rank order
  std::vector<SequenceId> running_;     // in rank order
  std::vector<SequenceId> to_release_;  // finished at the last Commit
  absl::flat_hash_set<SequenceId> cancel_requested_;
  std::vector<PlanItem> last_items_;
  KvLedger ledger_;
  uint64_t next_arrival_ = 0;
  int64_t preemptions_ = 0;
  bool passed_last_step_ = false;  // short_prompts_pass admitted last Plan
};

// Renders a plan as a one-line token diagram, e.g. "-C ^D +E | A1 B1 E4"
// (release, preempt, admit | items with token counts, prefill items marked
// with 'p': "E4p", cached tokens among them in parentheses: "E8p(4c)"). Ids
// 65..90 print as letters. For tests and logs.
std::string DescribePlan(const StepPlan& plan);

}  // namespace pdserve::scheduler

#endif  // PDSERVE_SCHEDULER_POLICY_H_
