#include "server/frontend/frontend_service.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "proto/rpc_util.h"
#include "server/frontend/generation_stream.h"

namespace pdserve::frontend {

// One Generate call: the server stream to the client over a
// GenerationStream (the request path shared with the HTTP API). Deleted
// when both the server stream and the generation are done.
class GenerateCall : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  GenerateCall(InferenceServiceImpl* service, const grpc::ByteBuffer& raw)
      : service_(service), start_(Clock::now()) {
    ++service_->active_;
    if (service_->metrics_ != nullptr) service_->metrics_->RecordRequestStart();
    if (service_->draining_) {
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
      CloseServer(rpc::ToGrpc(parsed.status()));
      return;
    }
    const v1::GenerateRequest& req = *parsed;
    const Clock::time_point encode_start = Clock::now();
    auto prepared = PrepareRequest(req, *service_->model_);
    if (service_->metrics_ != nullptr) {
      service_->metrics_->ObserveTokenizer(metrics::TokenizerOp::kEncode,
                                           Seconds(Clock::now() - encode_start));
    }
    if (!prepared.ok()) {
      CloseServer(rpc::ToGrpc(prepared.status()));
      return;
    }
    const std::string request_id =
        req.request_id().empty() ? NextRequestId() : req.request_id();
    refs_ = 2;
    stream_ = GenerationStream::Start(
        service_->generation_context(), req, *prepared, request_id,
        std::make_shared<Sink>(this), "grpc", start_);
  }

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
  // The client went away: the generation's cancel frees its capacity at the
  // next step.
  void OnCancel() override {
    if (stream_ != nullptr) stream_->Cancel();
  }
  void OnDone() override { Unref(); }

 private:
  using Clock = std::chrono::steady_clock;

  // Forwards the generation to the call (which outlives it: the call keeps
  // a reference until OnDone).
  struct Sink : GenerationSink {
    explicit Sink(GenerateCall* c) : call(c) {}
    void OnDelta(v1::Delta delta) override {
      v1::GenerateResponse resp;
      *resp.mutable_delta() = std::move(delta);
      std::lock_guard<std::mutex> lock(call->mu_);
      call->QueueLocked(resp);
    }
    void OnDone(const grpc::Status& status, const v1::Final& final) override {
      {
        std::lock_guard<std::mutex> lock(call->mu_);
        if (status.ok()) {
          v1::GenerateResponse resp;
          *resp.mutable_final() = final;
          call->QueueLocked(resp);
        }
        call->CloseServerLocked(status);
      }
      call->Unref();
    }
    GenerateCall* call;
  };

  static double Seconds(Clock::duration d) {
    return std::chrono::duration<double>(d).count();
  }

  void Unref() {
    if (--refs_ == 0) {
      --service_->active_;
      delete this;
    }
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
  // with RecordRequestStart).
  void RecordRequestLocked() {
    metrics::RequestStats r;
    if (stream_ != nullptr) r = stream_->Stats();
    r.method = "Generate";
    RecordFinishedRequest(service_->metrics_, r, "grpc", close_status_, start_);
  }

  InferenceServiceImpl* service_;
  Clock::time_point start_, write_start_;
  std::shared_ptr<GenerationStream> stream_;
  std::atomic<int> refs_{1};

  std::mutex mu_;
  std::deque<grpc::ByteBuffer> out_ ABSL_GUARDED_BY(mu_);  // front in flight when writing_
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool server_finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status close_status_ ABSL_GUARDED_BY(mu_);
};

InferenceServiceImpl::InferenceServiceImpl(const ModelContext* model,
                                           CellRouter* cells,
                                           metrics::FrontendMetrics* metrics)
    : model_(model), cells_(cells), metrics_(metrics) {}

grpc::ServerWriteReactor<grpc::ByteBuffer>* InferenceServiceImpl::Generate(
    grpc::CallbackServerContext*, const grpc::ByteBuffer* req) {
  return new GenerateCall(this, *req);
}

grpc::ServerUnaryReactor* InferenceServiceImpl::Tokenize(
    grpc::CallbackServerContext* ctx, const v1::TokenizeRequest* req,
    v1::TokenizeResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  auto ids = TokenizeText(*model_, req->text(), req->add_bos(),
                          req->parse_special());
  if (!ids.ok()) {
    reactor->Finish(rpc::ToGrpc(ids.status()));
    return reactor;
  }
  resp->mutable_token_ids()->Add(ids->begin(), ids->end());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::Detokenize(
    grpc::CallbackServerContext* ctx, const v1::DetokenizeRequest* req,
    v1::DetokenizeResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  auto text = DetokenizeIds(
      *model_, absl::MakeConstSpan(req->token_ids().data(), req->token_ids_size()));
  if (!text.ok()) {
    reactor->Finish(rpc::ToGrpc(text.status()));
    return reactor;
  }
  resp->set_text(std::move(*text));
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ListModels(
    grpc::CallbackServerContext* ctx, const v1::ListModelsRequest*,
    v1::ListModelsResponse* resp) {
  *resp->add_models() = DescribeModel(*model_);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace pdserve::frontend
