// The scheduler shell's step pipeline: plans are committed optimistically
// (every item assumed to continue) and written to the engine's StepStream up
// to pipeline_depth ahead; results are applied as they arrive (tokens
// streamed, finished sequences marked in the policy). The engine executes the
// stream in order, and an entry for a sequence that already finished is
// reported without running, so a speculative plan is always valid.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "proto/rpc_util.h"
#include "scheduler/scheduler_shell.h"

namespace pdserve::scheduler {

namespace {
int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void SchedulerShell::OpenStepStream() {
  in_flight_.clear();
  engine_forget_.clear();
  std::lock_guard<std::mutex> write_lock(write_mu_);
  std::lock_guard<std::mutex> lock(stream_mu_);
  stream_ctx_ = std::make_unique<grpc::ClientContext>();
  stream_ = engine_->StepStream(stream_ctx_.get());
}

bool SchedulerShell::WriteStep(const v1::StepRequest& req) {
  std::lock_guard<std::mutex> lock(write_mu_);
  return stream_ != nullptr && stream_->Write(req);
}

void SchedulerShell::WatchStepReads() {
  const int64_t limit_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               options_.step_deadline)
                               .count();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(250));
    const int64_t since = read_since_ns_.load();
    if (since == 0 || SteadyNs() - since < limit_ns) continue;
    std::lock_guard<std::mutex> stream_lock(stream_mu_);
    if (stream_ctx_ != nullptr && read_since_ns_.load() == since) {
      std::fprintf(stderr,
                   "pdserve scheduler: no step result for %lld ms; "
                   "cancelling the engine stream\n",
                   static_cast<long long>(options_.step_deadline.count()));
      stream_ctx_->TryCancel();
    }
  }
}

void SchedulerShell::RunStep() {
  const int64_t depth = std::max<int64_t>(1, options_.pipeline_depth);
  bool wrote = false;
  if (static_cast<int64_t>(in_flight_.size()) < depth) {
    wrote = DispatchNext();
    if (!engine_ready_) return;
  }
  // Read a result when the pipeline is full, or when nothing new could be
  // planned (the results in flight are what will change that).
  if (!in_flight_.empty() &&
      (!wrote || static_cast<int64_t>(in_flight_.size()) >= depth)) {
    ReceiveOne();
  }
}

void SchedulerShell::FillAdmit(uint64_t id, const Request& r,
                               const AdmitPages& pages,
                               v1::AddSequenceRequest* add) {
  add->set_seq_id(id);
  // The ledger's pages: the engine's pool takes exactly these.
  add->set_ledger(true);
  add->mutable_prefix_pages()->Add(pages.prefix_pages.begin(),
                                   pages.prefix_pages.end());
  add->mutable_pages()->Add(pages.pages.begin(), pages.pages.end());
  add->set_index_tokens(static_cast<int32_t>(pages.index_tokens));
  *add->mutable_prompt_ids() = r.spec.prompt_ids();
  // Recompute after preemption: the tokens generated so far join the prompt.
  for (int32_t t : r.generated) add->add_prompt_ids(t);
  add->set_resumed_outputs(static_cast<int32_t>(r.generated.size()));
  const int64_t remaining =
      r.spec.prefill_only()
          ? 1
          : r.spec.max_new_tokens() - static_cast<int64_t>(r.generated.size());
  add->set_export_kv(r.spec.prefill_only());
  add->set_import_id(r.import_id);
  add->set_max_new_tokens(static_cast<int32_t>(remaining));
  add->set_max_seq_len(static_cast<int32_t>(std::min<int64_t>(
      policy_->pool().max_seq_len, add->prompt_ids_size() + remaining)));
  *add->mutable_sampling() = r.spec.sampling();
  *add->mutable_stop_ids() = r.spec.stop_ids();
  add->set_top_logprobs(r.spec.top_logprobs());
  *add->mutable_images() = r.spec.images();
}

bool SchedulerShell::DispatchNext() {
  AdaptBudget();
  StepPlan plan = policy_->Plan();
  policy_->Commit({});  // optimistic; finishes arrive with the results
  // A preemption, or the readmission of a preempted request, needs every
  // token generated so far: wait for the steps in flight first.
  bool drain = !plan.preempted.empty();
  for (SequenceId id : plan.admit) {
    auto it = requests_.find(id);
    if (it != requests_.end() && it->second.was_admitted) drain = true;
  }
  while (drain && !in_flight_.empty()) {
    if (!ReceiveOne()) return false;
  }
  for (SequenceId id : plan.cancelled) Finish(id, v1::FINISH_REASON_CANCELLED);
  v1::StepRequest req;
  for (SequenceId id : plan.release) req.add_release_ids(id);
  for (SequenceId id : engine_forget_) req.add_release_ids(id);
  engine_forget_.clear();
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < plan.admit.size(); ++i) {
    const SequenceId id = plan.admit[i];
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    FillAdmit(id, it->second, plan.admit_pages[i], req.add_admit());
    it->second.import_id = 0;  // the engine takes a staged hand-off once
    if (!it->second.was_admitted) it->second.admitted = now;
    it->second.was_admitted = true;
  }
  for (const PlanItem& item : plan.items) {
    v1::StepItem* s = req.add_items();
    s->set_seq_id(item.id);
    s->set_num_tokens(static_cast<int32_t>(item.num_tokens));
    s->mutable_pages()->Add(item.pages.begin(), item.pages.end());
  }
  if (req.items_size() == 0 && req.release_ids_size() == 0 &&
      req.admit_size() == 0) {
    if (!plan.cancelled.empty() || !plan.preempted.empty()) {
      RecordIteration(plan, 0);
    }
    return false;
  }
  if (!WriteStep(req)) {
    LoseEngine("engine lost: the step stream closed");
    return false;
  }
  in_flight_.push_back(std::move(plan));
  return true;
}

void SchedulerShell::CloseStepStream() {
  in_flight_.clear();
  if (stream_ == nullptr) return;
  stream_ctx_->TryCancel();  // also ends a Cancel() blocked in a write
  std::lock_guard<std::mutex> write_lock(write_mu_);
  (void)stream_->Finish();
  stream_.reset();
  std::lock_guard<std::mutex> lock(stream_mu_);
  stream_ctx_.reset();
}

bool SchedulerShell::ReceiveOne() {
  v1::StepResponse resp;
  read_since_ns_.store(SteadyNs());
  const bool got = stream_->Read(&resp);
  read_since_ns_.store(0);
  if (!got) {
    grpc::Status s;
    {
      std::lock_guard<std::mutex> write_lock(write_mu_);
      s = stream_->Finish();
      stream_.reset();
    }
    // A refused step means the policy and the engine disagree about state;
    // both are reset the same way as after an engine loss.
    LoseEngine(s.ok() ? "engine lost: the step stream ended"
                      : "engine step failed: " + s.error_message());
    return false;
  }
  StepPlan plan = std::move(in_flight_.front());
  in_flight_.pop_front();
  ApplyResponse(plan, resp);
  return true;
}

void SchedulerShell::ApplyResponse(const StepPlan& plan,
                                   const v1::StepResponse& resp) {
  for (const v1::RejectedSequence& r : resp.rejected()) {
    // The engine refused this request only (e.g. a token id out of range).
    auto it = requests_.find(r.seq_id());
    if (it != requests_.end()) {
      it->second.sink->Close(rpc::ToGrpc(
          absl::Status(static_cast<absl::StatusCode>(r.code()), r.message())));
      requests_.erase(it);
    }
    policy_->Drop(r.seq_id());
    engine_forget_.push_back(r.seq_id());
  }
  for (const v1::CachedPrefix& c : resp.cached()) {
    policy_->MarkPrefixCached(c.seq_id(), c.tokens());
    auto it = requests_.find(c.seq_id());
    if (it != requests_.end() && it->second.generated.empty()) {
      it->second.cached_tokens =
          std::min(c.tokens(), it->second.spec.prompt_ids_size());
    }
  }
  if (resp.outputs_size() > 0) {
    ++steps_;
    const StepSample sample = SampleOf(plan, resp.step_ms());
    online_cost_.Record(sample);
    step_ms_mean_ = step_ms_mean_ == 0
                        ? sample.step_ms
                        : step_ms_mean_ + (sample.step_ms - step_ms_mean_) / 16;
    if (step_log_ != nullptr) {
      std::fprintf(step_log_, "%ld,%ld,%.3f,%.6f\n",
                   static_cast<long>(sample.prefill_tokens),
                   static_cast<long>(sample.decode_seqs), sample.step_ms,
                   sample.attended_mpairs);
      std::fflush(step_log_);
    }
  }
  const Clock::time_point now = Clock::now();
  int64_t finished = 0;
  for (const v1::SequenceOutput& out : resp.outputs()) {
    auto it = requests_.find(out.seq_id());
    if (it == requests_.end()) continue;  // cancelled or already finished
    Request& r = it->second;
    if (out.handoff_id() != 0) {
      r.handoff_id = out.handoff_id();
      ++handoffs_exported_;
    }
    if (out.has_token()) {
      if (r.generated.empty()) r.first_token = now;
      catching_up_.erase(out.seq_id());
      r.last_token = now;
      r.generated.push_back(out.token_id());
      v1::TokenEvent event;
      event.add_token_ids(out.token_id());
      event.add_logprobs(out.logprob());
      if (out.top_logprobs_size() > 0) {
        *event.add_top_logprobs()->mutable_alternatives() = out.top_logprobs();
      }
      r.sink->Send(event);
    }
    if (out.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      policy_->MarkFinished(out.seq_id());
      Finish(out.seq_id(), out.finish_reason());
      ++finished;
    }
  }
  RecordIteration(plan, finished);
}

}  // namespace pdserve::scheduler
