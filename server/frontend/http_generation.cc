#include "server/frontend/http_generation.h"

#include <random>

namespace pdserve::frontend {
namespace {

constexpr char kSse[] = "text/event-stream";

// One choice's events, forwarded to its generation.
class ChoiceSink : public GenerationSink {
 public:
  ChoiceSink(std::shared_ptr<HttpGeneration> g, int index)
      : g_(std::move(g)), index_(index) {}
  void OnFirstToken() override { g_->OnFirstToken(index_); }
  void OnDelta(v1::Delta delta) override { g_->OnDelta(index_, std::move(delta)); }
  void OnDone(const grpc::Status& status, const v1::Final& final) override {
    g_->OnDone(index_, status, final);
  }

 private:
  std::shared_ptr<HttpGeneration> g_;
  int index_;
};

}  // namespace

void HttpGeneration::Run(const GenerationContext& context,
                         std::unique_ptr<ApiFormat> format, ResponseMeta meta,
                         ApiRequest api, std::vector<PreparedRequest> prepared,
                         std::shared_ptr<http::ResponseWriter> out,
                         std::shared_ptr<std::atomic<int>> active,
                         GenerationStream::Clock::time_point start) {
  std::shared_ptr<HttpGeneration> g(new HttpGeneration());
  g->context_ = context;
  g->format_ = std::move(format);
  g->meta_ = std::move(meta);
  g->api_ = std::move(api);
  g->prepared_ = std::move(prepared);
  g->out_ = std::move(out);
  g->active_ = std::move(active);
  g->start_ = start;
  g->total_ = static_cast<int>(g->api_.prompts.size()) * g->api_.n;
  g->streams_.resize(g->total_);
  g->choices_.resize(g->total_);
  g->siblings_started_.assign(g->api_.prompts.size(), false);
  ++*g->active_;
  // The client closing the connection cancels every choice.
  std::weak_ptr<HttpGeneration> weak = g;
  g->out_->OnClientGone([weak] {
    if (auto self = weak.lock()) self->CancelAll();
  });
  for (size_t p = 0; p < g->api_.prompts.size(); ++p) {
    g->StartChoice(static_cast<int>(p) * g->api_.n);
  }
}

HttpGeneration::~HttpGeneration() { --*active_; }

void HttpGeneration::StartChoice(int index) {
  const int prompt = index / api_.n, sample = index % api_.n;
  v1::GenerateRequest req = api_.prompts[prompt];
  v1::SamplingParams* p = req.mutable_sampling();
  p->set_seed(api_.seeded ? p->seed() + sample : RandomRequestSeed());
  if (context_.metrics != nullptr) context_.metrics->RecordRequestStart();
  auto stream = GenerationStream::Start(
      context_, req, prepared_[prompt], absl::StrCat(meta_.id, "-", index),
      std::make_shared<ChoiceSink>(shared_from_this(), index), "http", start_);
  std::lock_guard<std::mutex> lock(mu_);
  streams_[index] = stream;
  if (cancelled_) stream->Cancel();
}

void HttpGeneration::StartSiblings(int index) {
  const int prompt = index / api_.n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (siblings_started_[prompt] || api_.n == 1) return;
    siblings_started_[prompt] = true;
    if (cancelled_ || error_.has_value()) {
      // Never started: each counts as done.
      for (int s = 1; s < api_.n; ++s) {
        choices_[prompt * api_.n + s].final.set_finish_reason(
            v1::FINISH_REASON_CANCELLED);
        ++done_;
      }
      if (done_ == total_) FinishLocked();
      return;
    }
  }
  for (int s = 1; s < api_.n; ++s) StartChoice(prompt * api_.n + s);
}

void HttpGeneration::CancelAll() {
  std::vector<std::shared_ptr<GenerationStream>> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    streams = streams_;
  }
  for (auto& s : streams) {
    if (s != nullptr) s->Cancel();
  }
}

void HttpGeneration::OnFirstToken(int index) {
  if (index % api_.n == 0) StartSiblings(index);
}

void HttpGeneration::StartStreamLocked() {
  if (stream_started_) return;
  stream_started_ = true;
  int32_t prompt_tokens = 0;
  for (const PreparedRequest& p : prepared_) {
    prompt_tokens += static_cast<int32_t>(p.prompt_ids.size());
  }
  out_->StartStream(200, kSse);
  out_->Write(format_->StreamStart(meta_, total_, prompt_tokens));
}

void HttpGeneration::OnDelta(int index, v1::Delta delta) {
  std::lock_guard<std::mutex> lock(mu_);
  if (api_.stream) {
    if (error_.has_value()) return;
    StartStreamLocked();
    out_->Write(format_->StreamDelta(meta_, index, delta));
  } else {
    MergeDelta(delta, &choices_[index].merged);
  }
}

void HttpGeneration::OnDone(int index, const grpc::Status& status,
                            const v1::Final& final) {
  RecordChoice(index, status);
  bool cancel_others = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    choices_[index].final = final;
    if (!status.ok() && !error_.has_value()) {
      const absl::Status s(static_cast<absl::StatusCode>(status.error_code()),
                           status.error_message());
      error_ = ToApiError(s, /*during_validation=*/false);
      cancel_others = true;
    }
    if (status.ok() && api_.stream) {
      StartStreamLocked();
      out_->Write(format_->StreamFinal(meta_, index, final));
    }
    if (status.ok()) last_final_ = final;
    ++done_;
    if (done_ == total_) FinishLocked();
  }
  if (cancel_others) CancelAll();
  // A sample 0 that ends before its first token still releases the others.
  if (index % api_.n == 0) StartSiblings(index);
}

void HttpGeneration::FinishLocked() {
  v1::Usage usage;
  for (size_t p = 0; p < prepared_.size(); ++p) {
    const v1::Usage& first = choices_[p * api_.n].final.usage();
    usage.set_prompt_tokens(usage.prompt_tokens() +
                            static_cast<int32_t>(prepared_[p].prompt_ids.size()));
    usage.set_cached_tokens(usage.cached_tokens() + first.cached_tokens());
  }
  for (const ChoiceResult& c : choices_) {
    usage.set_completion_tokens(usage.completion_tokens() +
                                c.final.usage().completion_tokens());
  }
  if (error_.has_value()) {
    if (stream_started_) {
      out_->Write(format_->StreamError(*error_));
      out_->End();
    } else {
      out_->Respond(error_->status, kJsonContentType,
                    DumpJson(format_->ErrorBody(*error_)));
    }
    return;
  }
  if (api_.stream) {
    StartStreamLocked();
    out_->Write(format_->StreamEnd(meta_, last_final_, usage));
    out_->End();
  } else {
    out_->Respond(200, kJsonContentType, DumpJson(format_->Complete(meta_, choices_, usage)));
  }
}

void HttpGeneration::RecordChoice(int index, const grpc::Status& status) {
  std::shared_ptr<GenerationStream> stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stream = streams_[index];
  }
  RecordFinishedRequest(context_.metrics,
                        stream != nullptr ? stream->Stats()
                                          : metrics::RequestStats(),
                        "http", status, start_);
}

}  // namespace pdserve::frontend
