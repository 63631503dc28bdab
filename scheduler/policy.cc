#include "scheduler/policy.h"

#include <algorithm>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pdserve::scheduler {
namespace {

// Attention pairs of `n` tokens computed from KV position `start`: token i
// (0-based) attends to start + i + 1 positions.
int64_t AttendedPairs(int64_t start, int64_t n) {
  return n * start + n * (n + 1) / 2;
}

}  // namespace

Policy::Policy(PolicyConfig config, PoolGeometry pool)
    : config_(config),
      pool_(pool),
      ledger_(pool.total_pages, pool.page_size, pool.prefix_cache) {}

int64_t Policy::PagesFor(int64_t tokens) const {
  if (tokens <= 0) return 0;
  return (tokens + pool_.page_size - 1) / pool_.page_size;
}

bool Policy::Before(const Seq& a, const Seq& b) const {
  if (a.spec.priority != b.spec.priority) {
    return a.spec.priority > b.spec.priority;
  }
  return a.arrival < b.arrival;
}

absl::Status Policy::Submit(const RequestSpec& request) {
  if (request.prompt_len <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "request %d: prompt of %d tokens; it must hold at least 1 token",
        request.id, request.prompt_len));
  }
  if (request.max_new_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("request %d: max_new_tokens %d must be > 0", request.id,
                        request.max_new_tokens));
  }
  if (request.imported_tokens < 0 ||
      request.imported_tokens >= request.prompt_len) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "request %d: %d imported tokens must be in [0, %d) (the prompt)",
        request.id, request.imported_tokens, request.prompt_len));
  }
  if (seqs_.contains(request.id)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("request %d is already queued or running", request.id));
  }
  if (request.prompt_len > pool_.max_seq_len) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "prompt of %d tokens exceeds the sequence capacity of %d tokens",
        request.prompt_len, pool_.max_seq_len));
  }
  const int64_t need = PagesFor(request.prompt_len + 1);
  if (need > pool_.total_pages) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "prompt of %d tokens needs %d KV pages of %d tokens; the pool has %d",
        request.prompt_len, need, pool_.page_size, pool_.total_pages));
  }
  if (!request.resumed && waiting() >= config_.max_waiting) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("queue full: %d requests waiting (bound %d)", waiting(),
                        config_.max_waiting));
  }
  Seq seq;
  seq.spec = request;
  seq.arrival = next_arrival_++;
  seq.target_prompt = request.prompt_len;
  seqs_.emplace(request.id, seq);
  InsertWaiting(request.id);
  return absl::OkStatus();
}

void Policy::InsertWaiting(SequenceId id) {
  const Seq& s = seqs_.at(id);
  auto pos = std::find_if(waiting_.begin(), waiting_.end(),
                          [&](SequenceId other) {
    return Before(s, seqs_.at(other));
  });
  waiting_.insert(pos, id);
}

void Policy::SortRunning() {
  std::stable_sort(running_.begin(), running_.end(),
                   [&](SequenceId a, SequenceId b) {
    return Before(seqs_.at(a), seqs_.at(b));
  });
}

bool Policy::Cancel(SequenceId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second.cancelled) return false;
  it->second.cancelled = true;
  cancel_requested_.insert(id);
  return true;
}

void Policy::Drop(SequenceId id) { Forget(id, /*written=*/false); }

void Policy::Forget(SequenceId id, bool written) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  // Unless the engine ran all of its plans (finished), what it indexed
  // itself leaves the prefix index (cancelled, refused, lost).
  if (it->second.running) ledger_.Close(id, written);
  std::erase(running_, id);
  std::erase(waiting_, id);
  cancel_requested_.erase(id);
  seqs_.erase(it);
}

SequenceView Policy::View(SequenceId id) const {
  SequenceView v;
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return v;
  const Seq& s = it->second;
  v.running = s.running;
  v.priority = s.spec.priority;
  v.prompt_len = s.spec.prompt_len;
  v.generated = s.generated;
  v.prefilled = s.prefilled;
  v.kv_tokens = s.kv_tokens;
  v.pages = s.pages;
  v.preemptions = s.preemptions;
  return v;
}

void Policy::ApplyCancellations(StepPlan& plan) {
  plan.release = std::move(to_release_);
  to_release_.clear();
  std::vector<SequenceId> ids(cancel_requested_.begin(),
                              cancel_requested_.end());
  std::sort(ids.begin(), ids.end());
  for (SequenceId id : ids) {
    const bool was_running = seqs_.at(id).running;
    Drop(id);
    if (was_running) plan.release.push_back(id);
    plan.cancelled.push_back(id);
  }
  cancel_requested_.clear();
}

void Policy::Preempt(SequenceId id, StepPlan& plan) {
  Seq& s = seqs_.at(id);
  ledger_.Close(id);
  s.running = false;
  s.pages = 0;
  s.kv_tokens = 0;
  s.prefilled = 0;
  s.cached = 0;
  // Recompute: everything generated so far becomes part of the prompt.
  s.target_prompt = s.spec.prompt_len + s.generated;
  ++s.preemptions;
  ++preemptions_;
  std::erase(running_, id);
  InsertWaiting(id);
  plan.release.push_back(id);
  plan.preempted.push_back(id);
}

void Policy::PlanDecodes(StepPlan& plan, int64_t& budget) {
  // Preempt from the back (lowest rank) until every decode's growth fits.
  while (true) {
    int64_t need = 0;
    for (SequenceId id : running_) {
      const Seq& s = seqs_.at(id);
      if (s.prefilled < s.target_prompt) continue;
      need += std::max<int64_t>(0, PagesFor(s.kv_tokens + 1) - s.pages);
    }
    if (need <= ledger_.free_pages() || running_.empty()) break;
    Preempt(running_.back(), plan);
  }
  for (SequenceId id : running_) {
    Seq& s = seqs_.at(id);
    if (s.prefilled < s.target_prompt || budget == 0) continue;
    PlanItem item{id, 1, false, false};
    plan.attended_pairs += s.kv_tokens + 1;
    if (PagesFor(s.kv_tokens + 1) > s.pages) {
      // Fits: the loop above preempted until every growth does.
      item.pages = *ledger_.Grow(id, s.kv_tokens + 1);
      s.pages = static_cast<int64_t>(ledger_.Pages(id).size());
    }
    plan.items.push_back(std::move(item));
    ++plan.decode_tokens;
    --budget;
  }
}

int64_t Policy::ChunkFor(const Seq& s, int64_t budget,
                         const StepPlan& plan) const {
  const int64_t remaining = s.target_prompt - s.prefilled - s.cached;
  const int64_t hard =
      config_.max_step_tokens > 0
          ? std::max<int64_t>(0, config_.max_step_tokens - plan.decode_tokens -
                                     plan.prefill_tokens)
          : remaining;
  if (config_.prefill_chunk > 0) {
    return std::min({remaining, config_.prefill_chunk, budget, hard});
  }
  // Chunking off: the whole prompt at once, over budget only when alone
  // (split only where the hard cap leaves no choice).
  if (remaining <= budget || plan.prefill_tokens == 0) {
    return std::min(remaining, hard);
  }
  return 0;
}

void Policy::PlanPrefills(StepPlan& plan, int64_t& budget) {
  for (SequenceId id : running_) {
    Seq& s = seqs_.at(id);
    if (s.prefilled >= s.target_prompt) continue;
    // Admitted by this plan already (a short prompt passing): its whole
    // prompt is planned.
    if (absl::c_linear_search(plan.admit, id)) continue;
    if (budget <= 0 && config_.prefill_chunk > 0) break;
    const int64_t n = ChunkFor(s, budget, plan);
    if (n <= 0) continue;
    // Cached tokens ride along for free, ahead of the chunk's real work.
    const int64_t free = std::min(s.cached, s.target_prompt - s.prefilled - n);
    plan.items.push_back(
        {id, free + n, true, s.prefilled + free + n == s.target_prompt, free});
    plan.prefill_tokens += n;
    plan.attended_pairs += AttendedPairs(s.prefilled + free, n);
    budget = std::max<int64_t>(0, budget - n);
  }
}

void Policy::PlanPassingAdmissions(StepPlan& plan, int64_t& budget) {
  const bool passed_before = passed_last_step_;
  passed_last_step_ = false;
  if (!config_.short_prompts_pass || config_.prefill_chunk <= 0 ||
      passed_before || waiting_.empty() || budget <= 0 ||
      !plan.preempted.empty()) {  // short of pages: nothing passes
    return;
  }
  const Seq* chunked = nullptr;  // the first running prompt mid-prefill
  for (SequenceId id : running_) {
    const Seq& s = seqs_.at(id);
    if (s.prefilled < s.target_prompt) {
      chunked = &s;
      break;
    }
  }
  if (chunked == nullptr) return;
  const size_t admitted = plan.admit.size();
  PlanAdmissions(plan, budget, chunked);
  passed_last_step_ = plan.admit.size() > admitted;
}

void Policy::PlanAdmissions(StepPlan& plan, int64_t& budget,
                            const Seq* passing) {
  while (!waiting_.empty() && running() < config_.max_running) {
    if (budget <= 0 && (config_.prefill_chunk > 0 || plan.prefill_tokens > 0)) {
      break;
    }
    const SequenceId id = waiting_.front();
    Seq& s = seqs_.at(id);
    if (passing != nullptr && s.spec.priority < passing->spec.priority) break;
    // The shared prefix: full cached pages of the prompt, keeping its last
    // token to compute (it yields the first logits).
    const std::vector<int32_t> prefix =
        s.spec.prompt_tokens.empty() || s.spec.imported_tokens > 0
            ? std::vector<int32_t>()
            : ledger_.Match(s.spec.prompt_tokens,
                            (s.target_prompt - 1) / pool_.page_size);
    const int64_t shared = static_cast<int64_t>(prefix.size());
    // New pages for the prompt and its first decode, plus the shared pages
    // no running sequence holds (taking them uses free pages).
    const int64_t cost = PagesFor(s.target_prompt + 1) - shared +
                         ledger_.UnheldPages(prefix);
    if (cost > ledger_.free_pages()) break;  // strict FCFS: the head blocks
    s.cached = s.spec.imported_tokens > 0
                   ? std::min(s.spec.imported_tokens, s.target_prompt - 1)
                   : shared * pool_.page_size;
    const int64_t n = ChunkFor(s, budget, plan);
    const bool whole = s.prefilled + s.cached + n >= s.target_prompt;
    if (n <= 0 || (passing != nullptr && !whole)) {
      s.cached = 0;
      break;
    }
    waiting_.erase(waiting_.begin());
    s.running = true;
    s.spec.imported_tokens = 0;  // a readmission (preempted) recomputes
    AdmitPages pages;
    pages.id = id;
    pages.prefix_pages = prefix;
    pages.index_tokens = static_cast<int64_t>(s.spec.prompt_tokens.size());
    (void)ledger_.Open(id, prefix, s.spec.prompt_tokens);
    pages.pages = *ledger_.Grow(id, s.target_prompt);  // fits: cost above
    s.pages = static_cast<int64_t>(ledger_.Pages(id).size());
    running_.push_back(id);
    plan.admit.push_back(id);
    plan.admit_pages.push_back(std::move(pages));
    const int64_t free = s.cached;
    plan.items.push_back({id, free + n, true,
                          s.prefilled + free + n == s.target_prompt, free});
    plan.prefill_tokens += n;
    plan.attended_pairs += AttendedPairs(s.prefilled + free, n);
    budget = std::max<int64_t>(0, budget - n);
  }
  SortRunning();
}

StepPlan Policy::Plan() {
  StepPlan plan;
  ApplyCancellations(plan);
  int64_t budget = config_.step_token_budget;
  PlanDecodes(plan, budget);
  PlanPassingAdmissions(plan, budget);
  PlanPrefills(plan, budget);
  PlanAdmissions(plan, budget);
  last_items_ = plan.items;
  return plan;
}

void Policy::Finish(SequenceId id) {
  Forget(id, /*written=*/true);
  to_release_.push_back(id);
}

int64_t Policy::decoding() const {
  int64_t n = 0;
  for (SequenceId id : running_) {
    const Seq& s = seqs_.at(id);
    n += s.prefilled >= s.target_prompt ? 1 : 0;
  }
  return n;
}

int64_t Policy::decoding_kv_tokens() const {
  int64_t n = 0;
  for (SequenceId id : running_) {
    const Seq& s = seqs_.at(id);
    n += s.prefilled >= s.target_prompt ? s.kv_tokens : 0;
  }
  return n;
}

int64_t Policy::next_prefill_position() const {
  for (SequenceId id : running_) {
    const Seq& s = seqs_.at(id);
    if (s.prefilled < s.target_prompt) return s.prefilled + s.cached;
  }
  return 0;
}

void Policy::MarkPrefixCached(SequenceId id, int64_t tokens) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || !it->second.running) return;
  Seq& s = it->second;
  // Committed plans already cover `prefilled` tokens; the last prompt token
  // stays real work.
  s.cached =
      std::max<int64_t>(0, std::min(tokens, s.target_prompt - 1) - s.prefilled);
}

void Policy::MarkFinished(SequenceId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || !it->second.running) return;
  Finish(id);
}

void Policy::Commit(absl::Span<const ItemOutcome> outcomes) {
  absl::flat_hash_set<SequenceId> finished;
  for (const ItemOutcome& o : outcomes) {
    if (o.finished) finished.insert(o.id);
  }
  for (const PlanItem& item : last_items_) {
    auto it = seqs_.find(item.id);
    if (it == seqs_.end() || !it->second.running) continue;
    Seq& s = it->second;
    if (item.prefill) {
      s.prefilled += item.num_tokens;
      s.cached = std::max<int64_t>(0, s.cached - item.cached_tokens);
      s.kv_tokens = s.prefilled;
      if (item.completes_prompt) ++s.generated;
    } else {
      ++s.kv_tokens;
      ++s.generated;
    }
    ledger_.MarkWritten(item.id, s.kv_tokens);
    // The engine decides when a sequence ends; max_new_tokens is a backstop.
    if (finished.contains(item.id) || s.generated >= s.spec.max_new_tokens) {
      Finish(item.id);
    }
  }
  last_items_.clear();
}

namespace {
std::string Name(SequenceId id) {
  if (id >= 'A' && id <= 'Z') return std::string(1, static_cast<char>(id));
  return absl::StrCat(id);
}
}  // namespace

std::string DescribePlan(const StepPlan& plan) {
  std::vector<std::string> head;
  for (SequenceId id : plan.release) {
    const bool preempted =
        std::find(plan.preempted.begin(), plan.preempted.end(), id) !=
        plan.preempted.end();
    head.push_back(absl::StrCat(preempted ? "^" : "-", Name(id)));
  }
  for (SequenceId id : plan.admit) head.push_back(absl::StrCat("+", Name(id)));
  std::string out;
  for (const auto& h : head) absl::StrAppend(&out, out.empty() ? "" : " ", h);
  absl::StrAppend(&out, out.empty() ? "|" : " |");
  for (const PlanItem& item : plan.items) {
    absl::StrAppend(&out, " ", Name(item.id), item.num_tokens,
                    item.prefill ? "p" : "");
    if (item.cached_tokens > 0)
      absl::StrAppend(&out, "(", item.cached_tokens, "c)");
  }
  return out;
}

}  // namespace pdserve::scheduler
