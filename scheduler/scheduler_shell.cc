#include "scheduler/scheduler_shell.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "proto/rpc_util.h"
#include "scheduler/live_request_ids.h"

namespace pdserve::scheduler {
namespace {

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

SchedulerShell::SchedulerShell(ShellOptions options)
    : options_(std::move(options)),
      live_ids_(std::make_unique<LiveRequestIds>()) {
  engine_ = v1::Engine::NewStub(rpc::MakeChannel(options_.engine_target));
  import_stub_ =
      v1::Engine::NewStub(rpc::MakeChannel(options_.engine_target));
  if (options_.engine_advertise.empty()) {
    options_.engine_advertise = options_.engine_target;
  }
  status_.role = options_.role;
  // Sequence ids carry a random epoch so that a restarted scheduler never
  // collides with sequences an engine still holds from its predecessor.
  std::random_device rd;
  next_id_ = (static_cast<uint64_t>(rd()) << 32) | 1;
  if (!options_.step_log_path.empty()) {
    step_log_ = std::fopen(options_.step_log_path.c_str(), "w");
    if (step_log_ != nullptr) {
      std::fprintf(step_log_, "prefill_tokens,decode_seqs,step_ms,attended_mpairs\n");
    }
  }
}

SchedulerShell::~SchedulerShell() {
  Stop();
  if (step_log_ != nullptr) std::fclose(step_log_);
}

void SchedulerShell::Start() {
  loop_ = std::thread([this] { Loop(); });
  watchdog_ = std::thread([this] { WatchStepReads(); });
  canceller_ = std::thread([this] { SendCancellations(); });
}

void SchedulerShell::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  {
    // Imports in flight call back into the shell: wait for them.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return importing_.empty(); });
  }
  {
    // A loop blocked on a step result must not hold up the stop.
    std::lock_guard<std::mutex> lock(stream_mu_);
    if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
  }
  if (loop_.joinable()) loop_.join();
  if (watchdog_.joinable()) watchdog_.join();
  if (canceller_.joinable()) canceller_.join();
}

uint64_t SchedulerShell::Submit(const v1::SubmitRequest& request,
                                std::shared_ptr<EventSink> sink) {
  Request r;
  r.spec = request;
  r.sink = std::move(sink);
  r.submitted = Clock::now();
  r.generated.assign(request.generated_ids().begin(),
                     request.generated_ids().end());
  r.spec.clear_generated_ids();
  const bool resubmitted = !r.generated.empty();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
    if (resubmitted && request.generated_ids_size() >= request.max_new_tokens()) {
      r.sink->Close(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("a resubmission carries ", request.generated_ids_size(),
                       " generated tokens; max_new_tokens is ",
                       request.max_new_tokens(), " (it must be larger)")));
      return id;
    }
    // A resubmitted stream (its scheduler died) waits for the engine too.
    if (resubmitted && !engine_ready_ && !stop_ &&
        options_.engine_recovery.count() > 0) {
      resume_pending_ = true;
    }
    if ((!engine_ready_ && !recovering_ && !resume_pending_) || stop_) {
      if (options_.metrics != nullptr) {
        options_.metrics->RecordRejection(metrics::RejectReason::kDraining);
      }
      r.sink->Close(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                 "the engine is not ready; retry shortly"));
      return id;
    }
    if (absl::Status s = live_ids_->Claim(request.request_id(), id); !s.ok()) {
      r.sink->Close(rpc::ToGrpc(s));
      return id;
    }
    r.sink = live_ids_->Releasing(std::move(r.sink), request.request_id(), id);
    if (!request.kv_source().engine().empty() &&
        request.kv_source().handoff_id() != 0 && resubmitted) {
      importing_.insert(id);
    } else {
      EnqueueLocked(id, std::move(r));
      return id;
    }
  }
  StartImport(id, std::move(r));
  return id;
}

void SchedulerShell::EnqueueLocked(uint64_t id, Request r) {
  inbox_.emplace_back(id, std::move(r));
  cv_.notify_all();
}

void SchedulerShell::Cancel(uint64_t handle) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Ended when its import comes back.
    if (importing_.contains(handle)) import_cancels_.insert(handle);
    cancels_.push_back(handle);
    urgent_cancels_.push_back(handle);
  }
  cv_.notify_all();
}

void SchedulerShell::SendCancellations() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait(lock, [&] { return stop_ || urgent_cancels_.size() > 0; });
    if (urgent_cancels_.empty()) continue;
    v1::StepRequest urgent;
    for (uint64_t id : urgent_cancels_) urgent.add_cancel_ids(id);
    urgent_cancels_.clear();
    lock.unlock();
    (void)WriteStep(urgent);  // no stream: the engine has nothing to free
    lock.lock();
  }
}

bool LoadChanged(const ShellStatus& a, const ShellStatus& b) {
  return a.engine_ready != b.engine_ready || a.recovering != b.recovering ||
         a.waiting != b.waiting || a.running != b.running ||
         a.total_kv_pages != b.total_kv_pages ||
         a.free_kv_pages != b.free_kv_pages ||
         a.cached_kv_pages != b.cached_kv_pages ||
         a.max_seq_len != b.max_seq_len || a.role != b.role;
}

ShellStatus SchedulerShell::Status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

bool SchedulerShell::ConnectEngine() {
  // A fresh channel per attempt: a channel that saw the engine die may sit
  // in reconnect backoff for seconds.
  engine_ = v1::Engine::NewStub(rpc::MakeChannel(options_.engine_target));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(500));
  v1::EngineInfo info;
  grpc::Status s = engine_->GetInfo(&ctx, v1::GetInfoRequest(), &info);
  if (!s.ok()) return false;
  // The policy's ledger starts with every page free: wait until the engine
  // has let go of the sequences of an earlier step stream.
  if (info.active_sequences() > 0 || info.free_pages() < info.total_pages()) {
    return false;
  }
  PolicyConfig config = options_.policy;
  config.max_running = std::min<int64_t>(config.max_running, info.max_batch());
  if (info.max_step_tokens() > 0) {
    config.max_step_tokens = info.max_step_tokens();
    config.step_token_budget =
        std::min<int64_t>(config.step_token_budget, info.max_step_tokens());
  }
  policy_ = std::make_unique<Policy>(
      config,
      PoolGeometry{info.page_size(), info.total_pages(), info.max_seq_len(),
                   info.prefix_cache()});
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_.max_seq_len = info.max_seq_len();
    status_.vocab_size = info.vocab_size();
    status_.model = info.model();
    status_.engine_ready = true;
    engine_ready_ = true;
  }
  engine_pid_ = info.pid();
  OpenStepStream();
  std::fprintf(stderr,
               "pdserve scheduler: engine ready (%s, pid %ld, %ld pages of %d "
               "tokens, capacity %d)\n",
               info.model().c_str(), static_cast<long>(info.pid()),
               static_cast<long>(info.total_pages()), info.page_size(),
               info.max_seq_len());
  if (on_ready_) on_ready_(true);
  return true;
}

void SchedulerShell::FailAll(const grpc::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, r] : inbox_) r.sink->Close(status);
    inbox_.clear();
  }
  for (auto& [id, r] : requests_) r.sink->Close(status);
  requests_.clear();
  policy_.reset();
  CloseStepStream();
}

void SchedulerShell::Loop() {
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
    }
    if (!engine_ready_) {
      if (resume_pending_.exchange(false) && !recovering_) {
        // Resubmitted streams arrived before this scheduler had an engine:
        // they wait like requests of a lost one.
        lost_since_ = Clock::now();
        lost_why_ = "no engine ready yet for resubmitted streams";
        recovering_ = true;
      }
      if (recovering_) TendSuspended();
      if (ConnectEngine()) {
        if (recovering_) ResumeAll();
      } else {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(100),
                     [&] { return stop_; });
      }
      continue;
    }
    DrainInbox();
    if (policy_->idle() && in_flight_.empty()) {
      PublishStatus();
      bool woken;
      {
        std::unique_lock<std::mutex> lock(mu_);
        woken = cv_.wait_for(lock, std::chrono::milliseconds(200), [&] {
          return stop_ || !inbox_.empty() || !cancels_.empty();
        });
      }
      if (!woken) CheckEngine();
      continue;
    }
    RunStep();
    PublishStatus();
  }
  FailAll(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                       "the scheduler is shutting down"));
}

void SchedulerShell::CheckEngine() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(500));
  v1::EngineInfo info;
  grpc::Status s = engine_->GetInfo(&ctx, v1::GetInfoRequest(), &info);
  if (s.ok() && info.pid() == engine_pid_) return;
  LoseEngine(s.ok() ? "the engine restarted"
                    : "engine lost: " + s.error_message());
}

void SchedulerShell::LoseEngine(const std::string& why) {
  std::fprintf(stderr, "pdserve scheduler: %s\n", why.c_str());
  ++engine_losses_;
  if (options_.metrics != nullptr) options_.metrics->RecordEngineLoss();
  if (options_.engine_recovery.count() > 0) {
    SuspendAll(why);
  } else {
    RecordUnrecovered(static_cast<int64_t>(requests_.size()));
    FailAll(grpc::Status(grpc::StatusCode::UNAVAILABLE, why));
  }
  engine_ready_ = false;
  PublishStatus();
  if (on_ready_) on_ready_(false);
}

void SchedulerShell::SuspendAll(const std::string& why) {
  policy_.reset();
  CloseStepStream();
  engine_forget_.clear();  // the engine drops them when its stream ends
  if (!lost_since_.has_value()) lost_since_ = Clock::now();
  lost_why_ = why;
  recovering_ = true;
  for (auto it = requests_.begin(); it != requests_.end();) {
    Request& r = it->second;
    r.import_id = 0;  // staged at the lost engine: recompute instead
    if (r.was_admitted && ++r.resumes > options_.max_resumes) {
      r.sink->Close(grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("the engine was lost ", r.resumes,
                       " times while serving this request (at most ",
                       options_.max_resumes, " resumptions): ", why)));
      requests_.erase(it++);
      RecordUnrecovered(1);
    } else {
      ++it;
    }
  }
}

void SchedulerShell::TendSuspended() {
  std::vector<uint64_t> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels.swap(cancels_);
  }
  std::vector<uint64_t> later;  // for requests still in the inbox
  for (uint64_t id : cancels) {
    if (requests_.contains(id)) {
      Finish(id, v1::FINISH_REASON_CANCELLED);
    } else {
      later.push_back(id);
    }
  }
  if (!later.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.insert(cancels_.end(), later.begin(), later.end());
  }
  const Clock::duration away = Clock::now() - *lost_since_;
  if (away < options_.engine_recovery) return;
  std::fprintf(stderr,
               "pdserve scheduler: the engine did not come back within %.1f "
               "s; ending %zu requests\n",
               Ms(options_.engine_recovery) / 1000.0, requests_.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    RecordUnrecovered(static_cast<int64_t>(requests_.size() + inbox_.size()));
  }
  FailAll(grpc::Status(
      grpc::StatusCode::UNAVAILABLE,
      absl::StrCat("the engine did not come back within ",
                   Ms(options_.engine_recovery) / 1000.0, " s (--engine-"
                   "recovery-seconds) after it was lost: ", lost_why_)));
  lost_since_.reset();
  recovering_ = false;
}

void SchedulerShell::ResumeAll() {
  std::vector<uint64_t> ids;
  ids.reserve(requests_.size());
  for (const auto& [id, r] : requests_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());  // ids grow with arrival
  int64_t resumed = 0, recompute_tokens = 0;
  for (uint64_t id : ids) {
    Request& r = requests_.at(id);
    RequestSpec spec = SpecFor(id, r);
    if (spec.max_new_tokens <= 0) {
      Finish(id, v1::FINISH_REASON_LENGTH);
      continue;
    }
    spec.resumed = true;
    if (absl::Status s = policy_->Submit(spec); !s.ok()) {
      r.sink->Close(rpc::ToGrpc(absl::Status(
          s.code(), absl::StrCat("could not resume the request on the "
                                 "engine that came back: ", s.message()))));
      requests_.erase(id);
      RecordUnrecovered(1);
      continue;
    }
    if (r.was_admitted) {
      ++resumed;
      recompute_tokens += spec.prompt_len;
    }
    if (!r.generated.empty()) catching_up_.insert(id);
  }
  const double away_ms = Ms(Clock::now() - *lost_since_);
  resumed_ += resumed;
  recomputed_tokens_ += recompute_tokens;
  lost_since_.reset();
  recovering_ = false;
  std::fprintf(stderr,
               "pdserve scheduler: resumed %ld requests (%ld tokens to "
               "recompute) %.0f ms after the engine was lost\n",
               static_cast<long>(resumed), static_cast<long>(recompute_tokens),
               away_ms);
  if (options_.metrics != nullptr) {
    options_.metrics->RecordRecovery(resumed, recompute_tokens,
                                     away_ms / 1000.0);
  }
}

RequestSpec SchedulerShell::SpecFor(uint64_t id, const Request& r) const {
  RequestSpec spec;
  spec.id = id;
  spec.priority = r.spec.priority();
  spec.prompt_tokens.reserve(r.spec.prompt_ids_size() + r.generated.size());
  spec.prompt_tokens.assign(r.spec.prompt_ids().begin(),
                            r.spec.prompt_ids().end());
  spec.prompt_tokens.insert(spec.prompt_tokens.end(), r.generated.begin(),
                            r.generated.end());
  spec.prompt_len = static_cast<int64_t>(spec.prompt_tokens.size());
  // Image placeholders do not identify their images: no prefix lookup.
  if (r.spec.images_size() > 0) spec.prompt_tokens.clear();
  spec.max_new_tokens =
      r.spec.max_new_tokens() - static_cast<int64_t>(r.generated.size());
  // A prefill cell computes the prompt and the first token only.
  if (r.spec.prefill_only()) spec.max_new_tokens = 1;
  if (r.import_id != 0) spec.imported_tokens = r.imported_tokens;
  return spec;
}

void SchedulerShell::DrainInbox() {
  std::deque<std::pair<uint64_t, Request>> inbox;
  std::vector<uint64_t> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& [id, r] : inbox) {
    const RequestSpec spec = SpecFor(id, r);
    absl::Status s = policy_->Submit(spec);
    if (!s.ok()) {
      RecordRejection(s, spec);
      r.sink->Close(rpc::ToGrpc(s));
      continue;
    }
    if (!r.generated.empty() && r.spec.kv_source().engine().empty()) {
      // A front end resubmitted it after its scheduler was lost: it
      // prefills its prompt and the tokens it had again.
      ++resumed_;
      recomputed_tokens_ += spec.prompt_len;
      catching_up_.insert(id);
      if (options_.metrics != nullptr) {
        options_.metrics->RecordRecovery(1, spec.prompt_len, -1);
      }
    }
    requests_.emplace(id, std::move(r));
  }
  for (uint64_t id : cancels) {
    if (requests_.contains(id)) policy_->Cancel(id);
  }
}

void SchedulerShell::Finish(uint64_t id, v1::FinishReason reason) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Request& r = it->second;
  if (r.spec.prefill_only() && reason == v1::FINISH_REASON_LENGTH &&
      static_cast<int64_t>(r.generated.size()) < r.spec.max_new_tokens()) {
    // The prompt is done; a decode cell takes it from here.
    r.sink->Send(PrefillDoneEvent(r));
    r.sink->Close(grpc::Status::OK);
    requests_.erase(it);
    return;
  }
  v1::TokenEvent final_event;
  final_event.set_finish_reason(reason);
  final_event.mutable_usage()->set_prompt_tokens(r.spec.prompt_ids_size());
  final_event.mutable_usage()->set_completion_tokens(
      static_cast<int32_t>(r.generated.size()));
  final_event.mutable_usage()->set_cached_tokens(r.cached_tokens);
  v1::Timings* t = final_event.mutable_timings();
  const Clock::time_point now = Clock::now();
  t->set_queue_ms(Ms((r.was_admitted ? r.admitted : now) - r.submitted));
  if (!r.generated.empty()) {
    t->set_ttft_ms(Ms(r.first_token - r.submitted));
    t->set_decode_ms(Ms(r.last_token - r.first_token));
  }
  r.sink->Send(final_event);
  r.sink->Close(reason == v1::FINISH_REASON_CANCELLED
                    ? grpc::Status(grpc::StatusCode::CANCELLED,
                                   "the request was cancelled")
                    : grpc::Status::OK);
  requests_.erase(it);
}

void SchedulerShell::AdaptBudget() {
  if (options_.itl_slowdown <= 1) return;
  absl::erase_if(catching_up_,
                 [&](uint64_t id) { return !requests_.contains(id); });
  policy_->set_step_token_budget(SchedulerStepBudget(
      *policy_, online_cost_, options_.itl_slowdown,
      options_.min_prefill_chunk, options_.policy.step_token_budget,
      /*catching_up=*/!catching_up_.empty(), options_.itl_floor_ms));
}

void SchedulerShell::RecordIteration(const StepPlan& plan, int64_t finished) {
  if (options_.metrics == nullptr) return;
  metrics::SchedulerStats st;
  st.waiting_requests = policy_->waiting();
  st.running_requests = policy_->running();
  st.admitted = static_cast<int64_t>(plan.admit.size());
  st.preempted = static_cast<int64_t>(plan.preempted.size());
  st.cancelled = static_cast<int64_t>(plan.cancelled.size());
  st.finished = finished;
  st.planned_prefill_tokens = plan.prefill_tokens;
  st.planned_decode_tokens = plan.decode_tokens;
  st.kv_total_pages = policy_->total_pages();
  st.kv_free_pages = policy_->free_pages();
  // token_budget stays 0 ("not reported"): an adapted budget may be lowered
  // below a plan that was cut before the change.
  (void)options_.metrics->RecordIteration(st);
}

void SchedulerShell::RecordRejection(const absl::Status& status,
                                     const RequestSpec& spec) {
  if (options_.metrics == nullptr) return;
  metrics::RejectReason reason = metrics::RejectReason::kInvalidArgument;
  if (status.code() == absl::StatusCode::kResourceExhausted) {
    const PoolGeometry& pool = policy_->pool();
    const int64_t pages =
        pool.page_size > 0 ? (spec.prompt_len + pool.page_size) / pool.page_size
                           : 0;  // pages for prompt_len + 1 tokens
    if (spec.prompt_len > pool.max_seq_len) {
      reason = metrics::RejectReason::kPromptTooLong;
    } else if (pages > pool.total_pages) {
      reason = metrics::RejectReason::kPoolTooSmall;
    } else {
      reason = metrics::RejectReason::kQueueFull;
    }
  }
  options_.metrics->RecordRejection(reason);
}

void SchedulerShell::RecordUnrecovered(int64_t requests) {
  if (options_.metrics != nullptr && requests > 0) {
    options_.metrics->RecordUnrecovered(requests);
  }
}

void SchedulerShell::PublishStatus() {
  std::lock_guard<std::mutex> lock(mu_);
  status_.engine_ready = engine_ready_;
  status_.recovering = recovering_;
  status_.engine_losses = engine_losses_;
  status_.resumed = resumed_;
  status_.recomputed_tokens = recomputed_tokens_;
  status_.handoffs_exported = handoffs_exported_.load();
  status_.handoffs_imported = handoffs_imported_.load();
  status_.handoffs_shared_memory = handoffs_shared_memory_.load();
  status_.handoffs_refused = handoffs_refused_.load();
  if (policy_ != nullptr) {
    status_.waiting = static_cast<int32_t>(policy_->waiting());
    status_.running = static_cast<int32_t>(policy_->running());
    status_.preemptions = policy_->preemptions();
    status_.total_kv_pages = policy_->total_pages();
    status_.free_kv_pages = policy_->free_pages();
    status_.cached_kv_pages = policy_->cached_pages();
  } else {
    // While the engine is away the kept requests count as waiting.
    status_.waiting = static_cast<int32_t>(requests_.size());
    status_.running = 0;
    status_.total_kv_pages = status_.free_kv_pages = 0;
    status_.cached_kv_pages = 0;
  }
  status_.steps = steps_;
  status_.step_ms = step_ms_mean_;
  if (options_.metrics != nullptr) {
    options_.metrics->SetQueue(status_.waiting, status_.running);
  }
}

}  // namespace pdserve::scheduler
