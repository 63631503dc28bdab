#include "server/frontend/generation_stream.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <map>
#include <utility>
#include <random>

#include "absl/strings/str_cat.h"
#include "proto/rpc_util.h"
#include "server/frontend/delayed_runner.h"

namespace pdserve::frontend {
namespace {

// Every stream not yet ended, for AbortAll.
struct OpenStreams {
  std::mutex mu;
  std::map<const void*, std::weak_ptr<GenerationStream>> streams;
};
OpenStreams& Open() {
  static OpenStreams* open = new OpenStreams();
  return *open;
}

double Seconds(GenerationStream::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

OutputParserOptions ParserOptions(const PreparedRequest& prepared,
                                  const std::string& request_id) {
  OutputParserOptions o = prepared.parser;
  o.call_id_seed = request_id;
  return o;
}

Detokenizer::Options DetokenizerOptions(const v1::GenerateRequest& req,
                                        const PreparedRequest& prepared) {
  Detokenizer::Options opts;
  opts.stop_strings = prepared.stop_strings;
  opts.strip_space_prefix = !req.keep_space_prefix();
  return opts;
}

}  // namespace

void RecordFinishedRequest(metrics::FrontendMetrics* metrics,
                           metrics::RequestStats stats, absl::string_view api,
                           const grpc::Status& status,
                           GenerationStream::Clock::time_point start) {
  if (metrics == nullptr) return;
  stats.api = api;
  stats.grpc_code = static_cast<int>(status.error_code());
  stats.e2e_seconds = Seconds(GenerationStream::Clock::now() - start);
  if (status.error_code() == grpc::StatusCode::CANCELLED) {
    stats.finish_reason = "cancelled";
  } else if (!status.ok()) {
    stats.finish_reason = "error";
  }
  if (absl::Status s = metrics->RecordRequest(stats); !s.ok()) {
    std::fprintf(stderr, "pdserve frontend: request metrics: %s\n",
                 std::string(s.message()).c_str());
  }
}

uint64_t RandomRequestSeed() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  return rng();
}

const std::string& FrontendInstanceId() {
  static const std::string id = [] {
    std::random_device dev;
    const uint64_t hi = dev(), lo = dev();
    return absl::StrCat(absl::Hex((hi << 32) ^ lo, absl::kZeroPad16));
  }();
  return id;
}

std::string NextRequestId(absl::string_view prefix) {
  static std::atomic<uint64_t> next{1};
  return absl::StrCat(prefix, FrontendInstanceId(), "-", next++);
}

GenerationStream::GenerationStream(const GenerationContext& context,
                                   const v1::GenerateRequest& req,
                                   const PreparedRequest& prepared,
                                   const std::string& request_id,
                                   std::shared_ptr<GenerationSink> sink,
                                   absl::string_view api,
                                   Clock::time_point start)
    : context_(context),
      sink_(std::move(sink)),
      api_(api),
      return_token_ids_(req.return_token_ids()),
      return_logprobs_(req.return_logprobs()),
      top_logprobs_(req.top_logprobs()),
      stop_strings_(prepared.stop_strings),
      detok_(*context.model->tokenizer, DetokenizerOptions(req, prepared)),
      parser_(ParserOptions(prepared, request_id)),
      start_(start) {}

std::shared_ptr<GenerationStream> GenerationStream::Start(
    const GenerationContext& context, const v1::GenerateRequest& req,
    const PreparedRequest& prepared, const std::string& request_id,
    std::shared_ptr<GenerationSink> sink, absl::string_view api,
    Clock::time_point start) {
  std::shared_ptr<GenerationStream> stream(
      new GenerationStream(context, req, prepared, request_id, std::move(sink),
                           api, start));
  GenerationStream& s = *stream;
  s.self_ = stream;
  s.request_id_ = request_id;
  s.prompt_tokens_ = static_cast<int32_t>(prepared.prompt_ids.size());
  // The scheduler's key: unique to this front end whatever id the client
  // chose (two replicas, or two clients, may both send "req-1").
  s.submit_.set_request_id(NextRequestId("fe-"));
  s.submit_.mutable_prompt_ids()->Add(prepared.prompt_ids.begin(),
                                      prepared.prompt_ids.end());
  *s.submit_.mutable_sampling() = req.sampling();
  s.submit_.set_max_new_tokens(prepared.max_new_tokens);
  s.submit_.mutable_stop_ids()->Add(prepared.stop_ids.begin(),
                                    prepared.stop_ids.end());
  s.submit_.set_priority(req.priority());
  s.submit_.set_top_logprobs(req.top_logprobs());
  for (const v1::ImageInput& img : prepared.images) *s.submit_.add_images() = img;
  if (prepared.constraint.has_value()) {
    *s.submit_.mutable_sampling()->mutable_constraint() = *prepared.constraint;
  }
  if (prepared.reasoning.has_value()) {
    *s.submit_.mutable_sampling()->mutable_reasoning() = *prepared.reasoning;
  }
  {
    std::lock_guard<std::mutex> lock(Open().mu);
    Open().streams[&s] = stream;
  }
  s.Submit();
  return stream;
}

void GenerationStream::AbortAll(const grpc::Status& status) {
  std::vector<std::shared_ptr<GenerationStream>> open;
  {
    std::lock_guard<std::mutex> lock(Open().mu);
    for (const auto& [key, weak] : Open().streams) {
      if (auto s = weak.lock()) open.push_back(std::move(s));
    }
  }
  for (const auto& s : open) s->Abort(status);
}

void GenerationStream::Abort(const grpc::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!abort_status_.has_value()) abort_status_ = status;
  }
  Cancel();
}

// One Submit call. Lives until gRPC's OnDone (self_), holding its stream
// until then; the stream holds it only to cancel it.
class GenerationStream::SchedulerCall
    : public grpc::ClientReadReactor<v1::TokenEvent> {
 public:
  SchedulerCall(std::shared_ptr<GenerationStream> stream,
                v1::SubmitRequest request)
      : stream_(std::move(stream)), request_(std::move(request)) {}

  void Begin(const std::shared_ptr<SchedulerCall>& self,
             std::shared_ptr<v1::Scheduler::Stub> stub) {
    self_ = self;
    stub_ = std::move(stub);  // its cell may leave the router meanwhile
    stub_->async()->Submit(&ctx_, &request_, this);
    StartRead(&event_);
    StartCall();
  }
  void Cancel() { ctx_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone(status) follows
    if (stream_->OnEvent(event_)) {
      StartRead(&event_);
    } else {
      // A stop string ended the reply: cancelling the scheduler request
      // frees its capacity at once; OnDone follows.
      ctx_.TryCancel();
    }
  }
  void OnDone(const grpc::Status& status) override {
    bool from_scheduler = false;
    for (const auto& [key, value] : ctx_.GetServerTrailingMetadata()) {
      if (absl::string_view(key.data(), key.size()) == rpc::kOriginKey) {
        from_scheduler = true;
      }
    }
    std::shared_ptr<GenerationStream> stream = std::move(stream_);
    stream->OnCallDone(this, status, from_scheduler);
    std::shared_ptr<SchedulerCall> keep = std::move(self_);  // may delete
  }

 private:
  std::shared_ptr<GenerationStream> stream_;
  std::shared_ptr<SchedulerCall> self_;
  std::shared_ptr<v1::Scheduler::Stub> stub_;
  grpc::ClientContext ctx_;
  v1::SubmitRequest request_;
  v1::TokenEvent event_;
};

int GenerationStream::MoveOffCell(const std::string& target) {
  std::vector<std::shared_ptr<GenerationStream>> open;
  {
    std::lock_guard<std::mutex> lock(Open().mu);
    for (const auto& [key, weak] : Open().streams) {
      if (auto s = weak.lock()) open.push_back(std::move(s));
    }
  }
  int moved = 0;
  for (const auto& s : open) moved += s->MoveIfOn(target);
  return moved;
}

bool GenerationStream::MoveIfOn(const std::string& target) {
  std::shared_ptr<SchedulerCall> call;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cell_ != target || call_ == nullptr || cancelled_ || final_sent_ ||
        abort_status_.has_value() || moving_) {
      return false;
    }
    moving_ = true;
    call = call_;
  }
  call->Cancel();  // OnCallDone resubmits, routed anew
  return true;
}

bool GenerationStream::ShouldSplitLocked() {
  if (!received_.empty() || split_tried_ || submit_.max_new_tokens() <= 1 ||
      submit_.prompt_ids_size() < context_.pd_min_prompt_tokens ||
      !context_.cells->CanSplit()) {
    return false;
  }
  // The decode cell must still have room for the first token's KV.
  return submit_.prompt_ids_size() + 1 < context_.cells->ReadyCapacity();
}

void GenerationStream::Submit() {
  v1::SubmitRequest request = submit_;
  std::shared_ptr<SchedulerCall> call;
  CellPhase phase = CellPhase::kServe;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A resubmission continues after what the client already has.
    request.mutable_generated_ids()->Add(received_.begin(), received_.end());
    if (handoff_.has_value()) {
      // On to a decode cell, which starts from the prefill cell's KV.
      *request.mutable_kv_source() = *std::exchange(handoff_, std::nullopt);
    } else if (ShouldSplitLocked()) {
      split_tried_ = true;
      request.set_prefill_only(true);
      phase = CellPhase::kPrefill;
    }
    prefill_done_.reset();
    call = std::make_shared<SchedulerCall>(self_, std::move(request));
    call_ = call;
  }
  // The prompt (plus what the client has) picks the cell: a resubmission
  // after a lost scheduler may land on another cell, and resumes there.
  CellRouter::Route route = context_.cells->Pick(
      absl::MakeConstSpan(submit_.prompt_ids().data(),
                          submit_.prompt_ids_size()),
      phase);
  if (context_.metrics != nullptr) {
    context_.metrics->RecordRoute(RouteReasonName(route.reason));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    cell_ = route.target;
  }
  if (route.stub == nullptr) {
    // No cell is known (a dns source resolved to nothing yet): a transport
    // failure as far as resubmission goes.
    OnCallDone(call.get(),
               grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            "no scheduler cell is known (--scheduler "
                            "resolved to no address)"),
               /*from_scheduler=*/false);
    return;
  }
  call->Begin(call, std::move(route.stub));
}

void GenerationStream::Cancel() {
  std::shared_ptr<SchedulerCall> call;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    call = call_;
  }
  // In a backoff (no call) the pending Resubmit ends the stream.
  if (call != nullptr) call->Cancel();
}

bool GenerationStream::OnEvent(const v1::TokenEvent& event) {
  v1::Delta delta;
  std::optional<v1::Final> final;
  bool first = false, stopped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lost_since_.reset();  // the scheduler answers again
    if (event.has_prefill_done()) {
      // The prefill cell is done: OnCallDone goes on to a decode cell.
      prefill_done_ = event.prefill_done();
      return true;
    }
    first = completion_tokens_ == 0 && event.token_ids_size() > 0;
    received_.insert(received_.end(), event.token_ids().begin(),
                     event.token_ids().end());
    stopped = HandleEventLocked(event, &delta, &final);
  }
  if (first) sink_->OnFirstToken();
  if (!delta.text().empty() || delta.token_ids_size() > 0 ||
      !delta.reasoning_text().empty() || delta.tool_calls_size() > 0) {
    sink_->OnDelta(std::move(delta));
  }
  if (final.has_value()) sink_->OnDone(grpc::Status::OK, *final);
  return !stopped;
}

bool GenerationStream::ShouldResubmitLocked(const grpc::Status& status,
                                            bool from_scheduler,
                                            grpc::Status* final_status) {
  if (final_sent_ || cancelled_ || context_.scheduler_recovery.count() <= 0) {
    return false;
  }
  const grpc::StatusCode code = status.error_code();
  // A dead scheduler: the call broke without the scheduler's own status.
  const bool broke = code == grpc::StatusCode::UNAVAILABLE && !from_scheduler;
  // While resubmitting: a restarted scheduler without an engine yet, or
  // the old one still holding the id, is waited out too.
  const bool waiting = lost_since_.has_value() &&
                       (code == grpc::StatusCode::UNAVAILABLE ||
                        code == grpc::StatusCode::ALREADY_EXISTS);
  if (!broke && !waiting) return false;
  if (static_cast<int64_t>(received_.size()) >= submit_.max_new_tokens()) {
    return false;  // every token is here; only the final was lost
  }
  const Clock::time_point now = Clock::now();
  if (!lost_since_.has_value()) lost_since_ = now;
  if (now - *lost_since_ >= context_.scheduler_recovery) {
    *final_status = grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        absl::StrCat("the scheduler did not come back within ",
                     Seconds(context_.scheduler_recovery),
                     " s (--scheduler-recovery-seconds): ",
                     status.error_message()));
    return false;
  }
  return true;
}

void GenerationStream::OnCallDone(const SchedulerCall* call,
                                  const grpc::Status& status,
                                  bool from_scheduler) {
  grpc::Status final_status = status;
  bool resubmit = false, moved = false, handed_off = false;
  int64_t attempt = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (call_.get() == call) call_.reset();
    if (abort_status_.has_value()) final_status = *abort_status_;
    std::optional<v1::KvHandoffRef> done =
        std::exchange(prefill_done_, std::nullopt);
    if (done.has_value() && status.ok() && !final_sent_ && !cancelled_ &&
        !abort_status_.has_value()) {
      // Prefilled: the moved-stream path below resubmits it at once, now
      // with the hand-off, to a decode cell.
      handoff_ = std::move(done);
      handed_off = true;
    }
    moved = std::exchange(moving_, false) || handed_off;
    const bool all_received =
        submit_.max_new_tokens() > 0 &&
        static_cast<int64_t>(received_.size()) >= submit_.max_new_tokens();
    if (moved && !final_sent_ && !cancelled_ && !abort_status_.has_value()) {
      // Taken off a cell whose engine was lost: carry on elsewhere.
      resubmit = !all_received;
      if (all_received) final_status = grpc::Status::OK;
    } else {
      resubmit = ShouldResubmitLocked(status, from_scheduler, &final_status);
    }
    if (resubmit && !moved) attempt = ++resubmissions_;
    // Every token arrived but the final did not: the length ended it.
    if (!resubmit && !final_sent_ && !cancelled_ &&
        status.error_code() == grpc::StatusCode::UNAVAILABLE &&
        !from_scheduler && all_received) {
      final_status = grpc::Status::OK;
    }
  }
  if (resubmit && moved) {
    // Routed anew at once: the cell it left is not ready any more, or it
    // was a prefill cell and a decode cell takes over (not a resubmission).
    if (context_.metrics != nullptr && !handed_off) {
      context_.metrics->RecordResubmission();
    }
    std::shared_ptr<GenerationStream> self = self_;
    DelayedRunner::Global().RunAfter(std::chrono::milliseconds(0),
                                     [self] { self->Resubmit(); });
    return;
  }
  if (resubmit) {
    if (attempt == 1) {
      std::fprintf(stderr,
                   "pdserve frontend: scheduler call of %s broke (%s); "
                   "resubmitting\n",
                   submit_.request_id().c_str(),
                   status.error_message().c_str());
    }
    if (context_.metrics != nullptr && attempt == 1) {
      context_.metrics->RecordResubmission();
    }
    // 10 ms, doubling, at most 200 ms between attempts (the channel's own
    // reconnect backoff is at most 250 ms).
    const auto backoff = std::chrono::milliseconds(
        std::min<int64_t>(200, int64_t{10} << std::min<int64_t>(attempt - 1, 5)));
    std::shared_ptr<GenerationStream> self = self_;
    DelayedRunner::Global().RunAfter(backoff, [self] { self->Resubmit(); });
    return;
  }
  if (final_status.ok() && !status.ok()) {
    std::optional<v1::Final> final;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!final_sent_) {
        final_sent_ = true;
        finish_reason_ = v1::FINISH_REASON_LENGTH;
        final = MakeFinalLocked(finish_reason_);
      }
    }
    if (final.has_value()) sink_->OnDone(grpc::Status::OK, *final);
  }
  End(final_status);
}

void GenerationStream::Resubmit() {
  bool cancelled;
  grpc::Status status(grpc::StatusCode::CANCELLED, "the request was cancelled");
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled = cancelled_;
    if (abort_status_.has_value()) status = *abort_status_;
  }
  if (cancelled) {
    End(status);
    return;
  }
  Submit();
}

void GenerationStream::End(const grpc::Status& status) {
  std::optional<v1::Final> final;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!final_sent_) {
      final_sent_ = true;
      final = MakeFinalLocked(v1::FINISH_REASON_ERROR);
      if (!status.ok()) final->set_error(status.error_message());
    }
  }
  if (final.has_value()) {
    const grpc::Status s =
        status.ok() ? grpc::Status(grpc::StatusCode::INTERNAL,
                                   "the scheduler stream ended without a "
                                   "result")
                    : status;
    if (s.error_code() == grpc::StatusCode::CANCELLED) {
      final->set_finish_reason(v1::FINISH_REASON_CANCELLED);
    }
    sink_->OnDone(s, *final);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (context_.metrics != nullptr) {
      context_.metrics->ObserveTokenizer(metrics::TokenizerOp::kDecode,
                                         Seconds(detok_time_));
    }
  }
  sink_.reset();
  {
    std::lock_guard<std::mutex> lock(Open().mu);
    Open().streams.erase(this);
  }
  std::shared_ptr<GenerationStream> keep = std::move(self_);  // may delete
}

bool GenerationStream::HandleEventLocked(const v1::TokenEvent& event,
                                         v1::Delta* delta,
                                         std::optional<v1::Final>* final) {
  if (final_sent_) return false;
  std::string text;
  bool stopped = false;
  for (int i = 0; i < event.token_ids_size(); ++i) {
    const int32_t id = event.token_ids(i);
    const Clock::time_point now = Clock::now();
    if (completion_tokens_ == 0) {
      first_token_ = now;
    } else if (context_.metrics != nullptr) {
      context_.metrics->ObserveInterTokenLatency(Seconds(now - last_token_),
                                                 api_);
    }
    last_token_ = now;
    ++completion_tokens_;
    if (return_token_ids_) delta->add_token_ids(id);
    if (return_logprobs_ && i < event.logprobs_size()) {
      delta->add_logprobs(event.logprobs(i));
    }
    if (top_logprobs_ > 0 && i < event.top_logprobs_size()) {
      *delta->add_top_logprobs() = event.top_logprobs(i);
    }
    const Clock::time_point decode_start = Clock::now();
    text += detok_.Feed(id);
    detok_time_ += Clock::now() - decode_start;
    if (detok_.stopped()) {
      stopped = true;
      break;
    }
  }
  const bool finished =
      stopped || event.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
  if (finished && !stopped) {
    const Clock::time_point decode_start = Clock::now();
    text += detok_.Finish();
    detok_time_ += Clock::now() - decode_start;
  }
  if (event.has_timings()) timings_ = event.timings();
  if (event.has_usage()) cached_tokens_ = event.usage().cached_tokens();
  ParsedDelta parsed = parser_.Feed(text);
  if (finished) {
    ParsedDelta rest = parser_.Finish();
    parsed.content += rest.content;
    parsed.reasoning += rest.reasoning;
    for (ToolCallDelta& c : rest.tool_calls) parsed.tool_calls.push_back(std::move(c));
  }
  delta->set_text(std::move(parsed.content));
  delta->set_reasoning_text(std::move(parsed.reasoning));
  for (const ToolCallDelta& c : parsed.tool_calls) {
    v1::ToolCallDelta* d = delta->add_tool_calls();
    d->set_index(c.index);
    d->set_id(c.id);
    d->set_name(c.name);
    d->set_arguments(c.arguments);
  }
  if (!finished) return false;
  finish_reason_ = stopped ? v1::FINISH_REASON_STOP : event.finish_reason();
  if (finish_reason_ == v1::FINISH_REASON_STOP && parser_.tool_call_count() > 0) {
    finish_reason_ = v1::FINISH_REASON_TOOL_CALLS;
  }
  *final = MakeFinalLocked(finish_reason_);
  if (stopped) (*final)->set_stop_string(stop_strings_[detok_.stop_index()]);
  final_sent_ = true;
  return stopped;
}

v1::Final GenerationStream::MakeFinalLocked(v1::FinishReason reason) const {
  v1::Final f;
  f.set_finish_reason(reason);
  f.set_request_id(request_id_);
  f.mutable_usage()->set_prompt_tokens(prompt_tokens_);
  f.mutable_usage()->set_completion_tokens(completion_tokens_);
  f.mutable_usage()->set_cached_tokens(cached_tokens_);
  if (timings_.has_value()) {
    *f.mutable_timings() = *timings_;
  } else if (completion_tokens_ > 0) {
    auto ms = [](Clock::duration d) {
      return std::chrono::duration<double, std::milli>(d).count();
    };
    f.mutable_timings()->set_ttft_ms(ms(first_token_ - start_));
    f.mutable_timings()->set_decode_ms(ms(last_token_ - first_token_));
  }
  return f;
}

metrics::RequestStats GenerationStream::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  metrics::RequestStats r;
  if (completion_tokens_ > 0) r.ttft_seconds = Seconds(first_token_ - start_);
  if (timings_.has_value()) {
    r.queue_seconds = timings_->queue_ms() / 1e3;
    if (completion_tokens_ > 0) {
      r.prefill_seconds =
          std::max(0.0, (timings_->ttft_ms() - timings_->queue_ms()) / 1e3);
      r.decode_seconds = timings_->decode_ms() / 1e3;
    }
  }
  r.prompt_tokens = prompt_tokens_;
  r.generated_tokens = completion_tokens_;
  switch (finish_reason_) {
    case v1::FINISH_REASON_STOP:
    case v1::FINISH_REASON_TOOL_CALLS:
      r.finish_reason = "stop";
      break;
    case v1::FINISH_REASON_LENGTH:
      r.finish_reason = "length";
      break;
    default:
      break;
  }
  return r;
}

}  // namespace pdserve::frontend
