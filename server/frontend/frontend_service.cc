#include "server/frontend/frontend_service.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "proto/rpc_util.h"
#include "server/tokenizer/detokenizer.h"
#include "server/tokenizer/unicode.h"

namespace pdserve::frontend {

// One Generate call: the server stream to the client and the client stream
// from the scheduler, in one object (deleted when both are done).
class GenerateCall : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                     public grpc::ClientReadReactor<v1::TokenEvent> {
 public:
  GenerateCall(InferenceServiceImpl* service, const grpc::ByteBuffer& raw)
      : service_(service), start_(Clock::now()) {
    ++service_->active_;
    if (service_->metrics_ != nullptr) service_->metrics_->RecordRequestStart();
    if (service_->draining_) {
      refs_ = 1;
      CloseServer(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                               "the server is shutting down"));
      return;
    }
    std::vector<grpc::Slice> slices;
    std::string wire;
    if (raw.Dump(&slices).ok()) {
      for (const grpc::Slice& sl : slices) {
        wire.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
      }
    }
    auto parsed = ParseGenerateRequest(wire);
    if (!parsed.ok()) {
      refs_ = 1;
      CloseServer(rpc::ToGrpc(parsed.status()));
      return;
    }
    req_ = std::move(*parsed);
    const v1::GenerateRequest& req = req_;
    const Clock::time_point encode_start = Clock::now();
    auto prepared = PrepareRequest(req, *service_->model_);
    if (service_->metrics_ != nullptr) {
      service_->metrics_->ObserveTokenizer(metrics::TokenizerOp::kEncode,
                                           Seconds(Clock::now() - encode_start));
    }
    if (!prepared.ok()) {
      refs_ = 1;
      CloseServer(rpc::ToGrpc(prepared.status()));
      return;
    }
    request_id_ = req.request_id().empty()
                      ? absl::StrCat("req-", service_->next_request_++)
                      : req.request_id();
    Detokenizer::Options opts;
    opts.stop_strings = prepared->stop_strings;
    detok_.emplace(*service_->model_->tokenizer, std::move(opts));
    prompt_tokens_ = static_cast<int32_t>(prepared->prompt_ids.size());
    submit_.set_request_id(request_id_);
    submit_.mutable_prompt_ids()->Add(prepared->prompt_ids.begin(),
                                      prepared->prompt_ids.end());
    *submit_.mutable_sampling() = req.sampling();
    submit_.set_max_new_tokens(prepared->max_new_tokens);
    submit_.mutable_stop_ids()->Add(prepared->stop_ids.begin(),
                                    prepared->stop_ids.end());
    submit_.set_priority(req.priority());
    refs_ = 2;
    client_started_ = true;
    service_->scheduler_->async()->Submit(&client_ctx_, &submit_, this);
    grpc::ClientReadReactor<v1::TokenEvent>::StartRead(&event_);
    grpc::ClientReadReactor<v1::TokenEvent>::StartCall();
  }

  // Server side.
  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    // A write that finished with messages queued behind it held the stream
    // up: the client (or the network) did not keep pace.
    if (out_.size() > 1 && service_->metrics_ != nullptr) {
      service_->metrics_->RecordStreamWriteStall(
          Seconds(Clock::now() - write_start_));
    }
    if (!out_.empty()) out_.pop_front();
    if (!ok) out_.clear();
    if (!out_.empty()) {
      StartWriteLocked();
    } else if (closing_) {
      FinishServerLocked();
    }
  }
  void OnCancel() override {
    // The client went away: cancelling the scheduler call cancels the
    // request there, which frees its capacity at the next step.
    if (client_started_) client_ctx_.TryCancel();
  }
  void OnDone() override { Unref(); }

  // Client side (scheduler stream).
  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone(status) follows
    bool stopped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      HandleEventLocked();
      stopped = detok_->stopped();
    }
    if (stopped) {
      // A stop string ended the reply: cancel the request in the scheduler.
      client_ctx_.TryCancel();
    } else {
      grpc::ClientReadReactor<v1::TokenEvent>::StartRead(&event_);
    }
  }
  void OnDone(const grpc::Status& status) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!final_sent_) {
        CloseServerLocked(status.ok() ? grpc::Status(grpc::StatusCode::INTERNAL,
                                                     "the scheduler stream "
                                                     "ended without a result")
                                      : status);
      }
    }
    Unref();
  }

 private:
  using Clock = std::chrono::steady_clock;

  static double Seconds(Clock::duration d) {
    return std::chrono::duration<double>(d).count();
  }

  void Unref() {
    if (--refs_ == 0) {
      --service_->active_;
      delete this;
    }
  }

  void HandleEventLocked() {
    if (final_sent_) return;
    v1::Delta delta;
    std::string text;
    bool stopped = false;
    for (int i = 0; i < event_.token_ids_size(); ++i) {
      const int32_t id = event_.token_ids(i);
      const Clock::time_point now = Clock::now();
      if (completion_tokens_ == 0) {
        first_token_ = now;
      } else if (service_->metrics_ != nullptr) {
        service_->metrics_->ObserveInterTokenLatency(Seconds(now - last_token_));
      }
      last_token_ = now;
      ++completion_tokens_;
      if (req_.return_token_ids()) delta.add_token_ids(id);
      if (req_.return_logprobs() && i < event_.logprobs_size()) {
        delta.add_logprobs(event_.logprobs(i));
      }
      const Clock::time_point decode_start = Clock::now();
      text += detok_->Feed(id);
      detok_time_ += Clock::now() - decode_start;
      if (detok_->stopped()) {
        stopped = true;
        break;
      }
    }
    const bool finished =
        stopped || event_.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
    if (finished && !stopped) {
      const Clock::time_point decode_start = Clock::now();
      text += detok_->Finish();
      detok_time_ += Clock::now() - decode_start;
    }
    if (event_.has_timings()) timings_ = event_.timings();
    if (finished) {
      finish_reason_ = stopped ? v1::FINISH_REASON_STOP : event_.finish_reason();
    }
    if (!text.empty() || delta.token_ids_size() > 0) {
      delta.set_text(std::move(text));
      v1::GenerateResponse resp;
      *resp.mutable_delta() = std::move(delta);
      QueueLocked(std::move(resp));
    }
    if (!finished) return;
    v1::GenerateResponse resp;
    v1::Final* f = resp.mutable_final();
    f->set_finish_reason(stopped ? v1::FINISH_REASON_STOP
                                 : event_.finish_reason());
    f->set_request_id(request_id_);
    f->mutable_usage()->set_prompt_tokens(prompt_tokens_);
    f->mutable_usage()->set_completion_tokens(completion_tokens_);
    if (event_.has_timings()) {
      *f->mutable_timings() = event_.timings();
    } else if (completion_tokens_ > 0) {
      auto ms = [](Clock::duration d) {
        return std::chrono::duration<double, std::milli>(d).count();
      };
      f->mutable_timings()->set_ttft_ms(ms(first_token_ - start_));
      f->mutable_timings()->set_decode_ms(ms(Clock::now() - first_token_));
    }
    QueueLocked(std::move(resp));
    final_sent_ = true;
    CloseServerLocked(grpc::Status::OK);
  }

  void QueueLocked(const v1::GenerateResponse& resp) {
    const std::string bytes = resp.SerializeAsString();
    grpc::Slice slice(bytes);
    out_.emplace_back(&slice, 1);
    if (!writing_) StartWriteLocked();
  }
  void StartWriteLocked() {
    writing_ = true;
    write_start_ = Clock::now();
    StartWrite(&out_.front());
  }
  void CloseServer(const grpc::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    CloseServerLocked(status);
  }
  void CloseServerLocked(const grpc::Status& status) {
    if (closing_) return;
    closing_ = true;
    close_status_ = status;
    if (!writing_) FinishServerLocked();
  }
  void FinishServerLocked() {
    if (server_finished_) return;
    server_finished_ = true;
    RecordRequestLocked();
    Finish(close_status_);
  }

  // Feeds the finished call to the front end's metrics (exactly once, paired
  // with RecordRequestStart). Queue / prefill / decode times come from the
  // scheduler's final timings when the stream got that far.
  void RecordRequestLocked() {
    metrics::FrontendMetrics* m = service_->metrics_;
    if (m == nullptr) return;
    if (detok_.has_value()) {
      m->ObserveTokenizer(metrics::TokenizerOp::kDecode, Seconds(detok_time_));
    }
    metrics::RequestStats r;
    r.grpc_code = static_cast<int>(close_status_.error_code());
    r.e2e_seconds = Seconds(Clock::now() - start_);
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
    r.finish_reason = FinishReasonLabel();
    if (absl::Status s = m->RecordRequest(r); !s.ok()) {
      std::fprintf(stderr, "pdserve frontend: request metrics: %s\n",
                   std::string(s.message()).c_str());
    }
  }
  absl::string_view FinishReasonLabel() const {
    if (close_status_.error_code() == grpc::StatusCode::CANCELLED) {
      return "cancelled";
    }
    if (!close_status_.ok()) return "error";
    switch (finish_reason_) {
      case v1::FINISH_REASON_STOP:
        return "stop";
      case v1::FINISH_REASON_LENGTH:
        return "length";
      case v1::FINISH_REASON_CANCELLED:
        return "cancelled";
      default:
        return "";
    }
  }

  InferenceServiceImpl* service_;
  v1::GenerateRequest req_;
  Clock::time_point start_, first_token_, last_token_, write_start_;
  Clock::duration detok_time_{0};  // Detokenizer Feed/Finish, guarded by mu_
  std::optional<v1::Timings> timings_;  // the scheduler's, guarded by mu_
  v1::FinishReason finish_reason_ = v1::FINISH_REASON_UNSPECIFIED;
  std::string request_id_;
  std::optional<Detokenizer> detok_;
  int32_t prompt_tokens_ = 0, completion_tokens_ = 0;
  grpc::ClientContext client_ctx_;
  v1::SubmitRequest submit_;
  v1::TokenEvent event_;
  bool client_started_ = false;
  std::atomic<int> refs_{1};

  std::mutex mu_;
  std::deque<grpc::ByteBuffer> out_;  // front in flight when writing_
  bool writing_ = false, closing_ = false, server_finished_ = false;
  bool final_sent_ = false;
  grpc::Status close_status_;
};

InferenceServiceImpl::InferenceServiceImpl(const ModelContext* model,
                                           v1::Scheduler::Stub* scheduler,
                                           metrics::FrontendMetrics* metrics)
    : model_(model), scheduler_(scheduler), metrics_(metrics) {}

grpc::ServerWriteReactor<grpc::ByteBuffer>* InferenceServiceImpl::Generate(
    grpc::CallbackServerContext*, const grpc::ByteBuffer* req) {
  return new GenerateCall(this, *req);
}

grpc::ServerUnaryReactor* InferenceServiceImpl::Tokenize(
    grpc::CallbackServerContext* ctx, const v1::TokenizeRequest* req,
    v1::TokenizeResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  const Tokenizer& tok = *model_->tokenizer;
  auto ids = tok.Encode(req->text(), req->parse_special());
  if (!ids.ok()) {
    reactor->Finish(rpc::ToGrpc(ids.status()));
    return reactor;
  }
  if (req->add_bos() && tok.bos_id() >= 0) resp->add_token_ids(tok.bos_id());
  resp->mutable_token_ids()->Add(ids->begin(), ids->end());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::Detokenize(
    grpc::CallbackServerContext* ctx, const v1::DetokenizeRequest* req,
    v1::DetokenizeResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  const Tokenizer& tok = *model_->tokenizer;
  for (int i = 0; i < req->token_ids_size(); ++i) {
    const int32_t id = req->token_ids(i);
    if (id < 0 || id >= tok.vocab_size()) {
      reactor->Finish(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("token_ids[", i, "] = ", id, " is outside the vocabulary [0, ",
                       tok.vocab_size(), ")")));
      return reactor;
    }
  }
  std::vector<int32_t> ids(req->token_ids().begin(), req->token_ids().end());
  resp->set_text(unicode::ReplaceInvalidUtf8(tok.Decode(ids)));
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ListModels(
    grpc::CallbackServerContext* ctx, const v1::ListModelsRequest*,
    v1::ListModelsResponse* resp) {
  v1::ModelInfo* m = resp->add_models();
  m->set_name(model_->name);
  m->set_vocab_size(model_->tokenizer->vocab_size());
  m->set_max_seq_len(static_cast<int32_t>(model_->max_seq_len));
  m->set_has_chat_template(!model_->tokenizer->chat_template().empty());
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace pdserve::frontend
