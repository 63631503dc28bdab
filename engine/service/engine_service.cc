#include "absl/base/thread_annotations.h"
#include "engine/service/engine_service.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <string>
#include <thread>

#include "engine/grammar/grammar_proto.h"
#include "engine/model/sampler.h"
#include "proto/rpc_util.h"

namespace pdserve::service {

SamplingParams ToSamplingParams(const v1::SamplingParams& p) {
  SamplingParams s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.top_p() == 0.0f ? 1.0f : p.top_p();
  s.min_p = p.min_p();
  s.repetition_penalty =
      p.repetition_penalty() == 0.0f ? 1.0f : p.repetition_penalty();
  s.seed = p.seed();
  s.presence_penalty = p.presence_penalty();
  s.frequency_penalty = p.frequency_penalty();
  s.logit_bias.assign(p.logit_bias().begin(), p.logit_bias().end());
  std::sort(s.logit_bias.begin(), s.logit_bias.end());  // map order varies
  const v1::ReasoningControl& r = p.reasoning();
  s.reasoning.max_tokens = r.max_tokens();
  s.reasoning.start_ids.assign(r.start_ids().begin(), r.start_ids().end());
  s.reasoning.end_ids.assign(r.end_ids().begin(), r.end_ids().end());
  s.reasoning.starts_inside = r.starts_inside();
  return s;
}

namespace {
constexpr int64_t kHandoffBytes = int64_t{1} << 30;
constexpr int64_t kHandoffTtlNs = int64_t{60} * 1000 * 1000 * 1000;
// Hand-off ids of this process: pid and start time in the high bits.
uint64_t HandoffSalt() {
  const uint64_t t = static_cast<uint64_t>(
      std::chrono::steady_clock::now().time_since_epoch().count());
  return ((static_cast<uint64_t>(getpid()) << 40) ^ (t << 20)) &
         ~uint64_t{0xFFFFF};
}
}  // namespace

EngineServiceImpl::EngineServiceImpl(EngineCore* core, std::string model_name,
                                     std::string backend,
                                     int64_t max_step_tokens)
    : core_(core),
      model_name_(std::move(model_name)),
      backend_(std::move(backend)),
      max_step_tokens_(max_step_tokens),
      handoff_shape_(core->HandoffShape()),
      capacity_(core->max_seq_len()),
      exports_(kHandoffBytes, kHandoffTtlNs, HandoffSalt()),
      imports_(kHandoffBytes, kHandoffTtlNs, HandoffSalt()),
      shm_host_id_(SharedMemoryHostId()),
      shm_leases_(kHandoffTtlNs) {}

grpc::Status EngineServiceImpl::GetInfo(grpc::ServerContext*,
                                        const v1::GetInfoRequest*,
                                        v1::EngineInfo* resp) {
  std::lock_guard<std::mutex> lock(mu_);
  const KvGeometry& g = core_->Geometry();
  const EngineStats stats = core_->Stats();
  const ModelConfig& config = core_->model_config();
  resp->set_model(model_name_);
  resp->set_vocab_size(static_cast<int32_t>(config.vocab_size));
  resp->set_max_seq_len(static_cast<int32_t>(core_->max_seq_len()));
  resp->set_page_size(static_cast<int32_t>(g.page_size));
  resp->set_total_pages(stats.pool.total_pages);
  resp->set_free_pages(stats.pool.free_pages);
  resp->set_max_batch(static_cast<int32_t>(g.max_sequences));
  resp->set_active_sequences(static_cast<int32_t>(stats.pool.sequences));
  resp->set_steps(stats.steps);
  resp->set_eos_id(config.eos_token_id);
  resp->set_backend(backend_);
  resp->set_pid(getpid());
  resp->set_max_step_tokens(static_cast<int32_t>(max_step_tokens_));
  resp->set_prefix_cache_query_tokens(stats.prefix_query_tokens);
  resp->set_prefix_cache_hit_tokens(stats.prefix_hit_tokens);
  resp->set_cached_pages(stats.pool.cached_pages);
  resp->set_kv_dtype(KvDTypeName(g.dtype));
  resp->set_kv_bytes_per_token(g.bytes_per_token);
  resp->set_prefix_cache(core_->prefix_cache_enabled());
  return grpc::Status::OK;
}

namespace {
v1::FinishReason ToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    default:
      return v1::FINISH_REASON_UNSPECIFIED;
  }
}
}  // namespace

namespace {

// One StepStream's inbox. A reader thread fills it as messages arrive, so the
// engine sees cancellations while a step runs; the handler thread executes
// the queued requests in order.
struct StepInbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<v1::StepRequest> requests ABSL_GUARDED_BY(mu);
  // StepRequest.cancel_ids, not yet applied.
  std::vector<uint64_t> cancels ABSL_GUARDED_BY(mu);
  bool reads_done ABSL_GUARDED_BY(mu) = false;
};

void ReadRequests(
    grpc::ServerReaderWriter<v1::StepResponse, v1::StepRequest>* stream,
    StepInbox* inbox, grammar::GrammarCompiler* grammar) {
  v1::StepRequest req;
  while (stream->Read(&req)) {
    // Admissions are read ahead of the step that runs them: their grammars
    // start compiling now, beside the running step, not in it.
    if (grammar != nullptr) {
      for (const v1::AddSequenceRequest& add : req.admit()) {
        if (!add.sampling().has_constraint()) continue;
        auto spec = grammar::SpecFromProto(add.sampling().constraint());
        if (spec.ok()) grammar->Prefetch(*spec);
      }
    }
    std::lock_guard<std::mutex> lock(inbox->mu);
    for (uint64_t id : req.cancel_ids()) inbox->cancels.push_back(id);
    if (req.items_size() > 0 || req.release_ids_size() > 0 ||
        req.admit_size() > 0 || req.cancel_ids_size() == 0) {
      req.clear_cancel_ids();
      inbox->requests.push_back(std::move(req));
    }
    inbox->cv.notify_one();
  }
  std::lock_guard<std::mutex> lock(inbox->mu);
  inbox->reads_done = true;
  inbox->cv.notify_one();
}

// Sends a stream's responses from its own thread, so that sending step N
// (about half a millisecond on loopback) overlaps step N+1.
class ResponseWriter {
 public:
  explicit ResponseWriter(
      grpc::ServerReaderWriter<v1::StepResponse, v1::StepRequest>* stream)
      : stream_(stream), thread_([this] { Run(); }) {}
  ~ResponseWriter() { Finish(); }

  // False once a write has failed (the client is gone).
  bool Push(v1::StepResponse resp) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) return false;
    out_.push_back(std::move(resp));
    cv_.notify_one();
    return true;
  }
  // Sends what is queued, then stops.
  void Finish() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return done_ || !out_.empty(); });
      if (out_.empty()) return;
      v1::StepResponse resp = std::move(out_.front());
      out_.pop_front();
      lock.unlock();
      const bool ok = stream_->Write(resp);
      lock.lock();
      if (!ok) {
        failed_ = true;
        return;
      }
    }
  }

  grpc::ServerReaderWriter<v1::StepResponse, v1::StepRequest>* stream_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::StepResponse> out_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace

grpc::Status EngineServiceImpl::StepStream(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<v1::StepResponse, v1::StepRequest>* stream) {
  StepInbox inbox;
  ResponseWriter writer(stream);
  std::thread reader([&] { ReadRequests(stream, &inbox, grammar_); });
  // Sequences this stream admitted (or cancelled) and has not released: when
  // the stream ends (the scheduler went away or gave up on a hung step)
  // nobody else will release them, so they are released here.
  absl::flat_hash_set<uint64_t> owned;
  grpc::Status status = grpc::Status::OK;
  bool reads_done = false;
  while (status.ok()) {
    v1::StepRequest req;
    {
      std::unique_lock<std::mutex> lock(inbox.mu);
      inbox.cv.wait(lock, [&] {
        return inbox.reads_done || !inbox.requests.empty() ||
               !inbox.cancels.empty();
      });
      if (!inbox.cancels.empty())
        ApplyCancels(&inbox.cancels, inbox.requests, &owned);
      if (inbox.requests.empty()) {
        if (!inbox.reads_done) continue;
        reads_done = true;
        break;
      }
      req = std::move(inbox.requests.front());
      inbox.requests.pop_front();
    }
    v1::StepResponse resp;
    {
      std::lock_guard<std::mutex> lock(mu_);
      status = ExecuteLocked(req, &resp);
    }
    for (uint64_t id : req.release_ids()) owned.erase(id);
    for (const v1::AddSequenceRequest& add : req.admit())
      owned.insert(add.seq_id());
    for (const v1::RejectedSequence& r : resp.rejected())
      owned.erase(r.seq_id());
    if (status.ok() && !writer.Push(std::move(resp))) break;
  }
  writer.Finish();
  // Stopped early (a failed step or write): unblock the reader's Read.
  if (!reads_done) ctx->TryCancel();
  reader.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (uint64_t id : owned) {
    (void)core_->Release(id);
    cancelled_.erase(id);
  }
  return status;
}

void EngineServiceImpl::ApplyCancels(std::vector<uint64_t>* ids,
                                     const std::deque<v1::StepRequest>& queued,
                                     absl::flat_hash_set<uint64_t>* owned) {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint64_t id : *ids) {
    bool admission_queued = false;
    for (const v1::StepRequest& req : queued) {
      for (const v1::AddSequenceRequest& add : req.admit()) {
        admission_queued |= add.seq_id() == id;
      }
    }
    if (core_->Release(id).ok() || admission_queued) {
      cancelled_.insert(id);
      owned->insert(id);
    }
  }
  ids->clear();
}

void EngineServiceImpl::AdmitLocked(const v1::StepRequest& req,
                                    v1::StepResponse* resp) {
  for (uint64_t id : req.release_ids()) {
    rejected_.erase(id);
    cancelled_.erase(id);
    (void)core_->Release(id);  // NOT_FOUND: already gone, harmless
  }
  for (const v1::AddSequenceRequest& add : req.admit()) {
    if (cancelled_.contains(add.seq_id())) continue;
    absl::Status s = AddLocked(add);
    if (s.ok()) s = ApplyHandoffLocked(add);
    if (s.ok()) {
      if (const int64_t c = core_->CachedPrefixTokens(add.seq_id()); c > 0) {
        v1::CachedPrefix* cached = resp->add_cached();
        cached->set_seq_id(add.seq_id());
        cached->set_tokens(static_cast<int32_t>(c));
      }
      continue;
    }
    rejected_.insert(add.seq_id());
    v1::RejectedSequence* r = resp->add_rejected();
    r->set_seq_id(add.seq_id());
    r->set_code(static_cast<int32_t>(s.code()));
    r->set_message(std::string(s.message()));
  }
}

absl::Status EngineServiceImpl::AddLocked(const v1::AddSequenceRequest& req) {
  SamplingParams params = ToSamplingParams(req.sampling());
  params.top_logprobs = req.top_logprobs();
  if (req.sampling().has_constraint()) {
    if (grammar_ == nullptr) {
      return absl::FailedPreconditionError(
          "this engine has no tokenizer for constrained decoding (see "
          "--tokenizer)");
    }
    absl::StatusOr<grammar::GrammarSpec> spec =
        grammar::SpecFromProto(req.sampling().constraint());
    if (!spec.ok()) return spec.status();
    auto compiled = grammar_->Compile(*spec);
    if (!compiled.ok()) return compiled.status();
    params.grammar = std::move(*compiled);
  }
  LedgerPages ledger;
  ledger.prefix_pages =
      absl::MakeConstSpan(req.prefix_pages().data(), req.prefix_pages_size());
  ledger.pages = absl::MakeConstSpan(req.pages().data(), req.pages_size());
  ledger.index_tokens = req.index_tokens();
  std::vector<SequenceImage> images;
  for (const v1::ImageInput& img : req.images()) {
    images.push_back({img.data(), {img.grid_t(), img.grid_h(), img.grid_w()}});
  }
  return core_->AddSequence(
      req.seq_id(),
      absl::MakeConstSpan(req.prompt_ids().data(), req.prompt_ids_size()),
      req.max_seq_len(), params,
      absl::MakeConstSpan(req.stop_ids().data(), req.stop_ids_size()),
      req.max_new_tokens(), req.ledger() ? &ledger : nullptr,
      req.resumed_outputs(), images);
}

grpc::Status EngineServiceImpl::ExecuteLocked(const v1::StepRequest& req,
                                              v1::StepResponse* resp) {
  AdmitLocked(req, resp);
  plan_.clear();
  for (const v1::StepItem& item : req.items()) {
    if (rejected_.contains(item.seq_id()) ||
        cancelled_.contains(item.seq_id())) {
      continue;
    }
    if (item.pages_size() > 0) {
      absl::Status s = core_->AssignPages(
          item.seq_id(),
          absl::MakeConstSpan(item.pages().data(), item.pages_size()));
      if (!s.ok()) return rpc::ToGrpc(s);
    }
    plan_.push_back({item.seq_id(), item.num_tokens()});
  }
  if (plan_.empty()) {
    resp->set_free_pages(core_->Stats().pool.free_pages);
    return grpc::Status::OK;
  }
  absl::Status s = core_->Step(plan_, &result_);
  if (!s.ok()) return rpc::ToGrpc(s);
  int32_t prefill = 0, decode = 0;
  for (size_t i = 0; i < result_.sequences.size(); ++i) {
    const SequenceStepResult& r = result_.sequences[i];
    v1::SequenceOutput* out = resp->add_outputs();
    out->set_seq_id(r.id);
    out->set_has_token(r.has_token);
    out->set_token_id(r.token);
    out->set_logprob(r.logprob);
    out->set_finish_reason(ToProto(r.finish));
    out->set_kv_tokens(static_cast<int32_t>(r.next_pos));
    for (int32_t k = 0; k < r.num_top; ++k) {
      v1::TokenLogprob* alt = out->add_top_logprobs();
      alt->set_token_id(r.top[k].token);
      alt->set_logprob(r.top[k].logprob);
    }
    (plan_[i].num_tokens > 1 || !r.has_token ? prefill : decode) +=
        r.tokens_processed;
  }
  StoreExportsLocked(resp);
  resp->set_step_ms(static_cast<double>(result_.total_ns) / 1e6);
  resp->set_prefill_tokens(prefill);
  resp->set_decode_tokens(decode);
  resp->set_free_pages(core_->Stats().pool.free_pages);
  if (metrics_ != nullptr && prefill + decode > 0) {
    RecordStepLocked(prefill, decode);
  }
  return grpc::Status::OK;
}

void EngineServiceImpl::AttachMetrics(metrics::EngineMetrics* metrics) {
  std::lock_guard<std::mutex> lock(mu_);
  metrics_ = metrics;
}

void EngineServiceImpl::RecordStepLocked(int64_t prefill, int64_t decode) {
  metrics::StepStats step;
  step.kind = metrics::ClassifyStep(prefill, decode);
  step.duration_seconds = static_cast<double>(result_.total_ns) * 1e-9;
  step.prefill_tokens = prefill;
  step.decode_tokens = decode;
  step.batch_size = static_cast<int64_t>(plan_.size());
  step.weight_bytes_read = result_.weight_bytes_read;
  step.kv_bytes_read = result_.kv_bytes_read;
  step.kv_bytes_written = result_.kv_bytes_written;
  step.flops = result_.flops;
  if (absl::Status s = metrics_->RecordStep(step); !s.ok()) {
    std::fprintf(stderr, "pdserve engine: step metrics: %s\n",
                 std::string(s.message()).c_str());
  }
  const KvGeometry& g = core_->Geometry();
  const KvPoolStats pool = core_->Stats().pool;
  metrics::PoolStats p;
  p.capacity_tokens = pool.total_tokens;
  p.used_tokens = std::min(pool.used_tokens, pool.total_tokens);
  p.page_size_tokens = g.page_size;
  p.total_pages = pool.total_pages;
  p.used_pages = pool.used_pages;
  p.capacity_bytes = g.num_pages * g.bytes_per_page +
                     g.max_sequences * g.linear_state_bytes_per_sequence;
  p.active_sequences = pool.sequences;
  p.max_sequences = g.max_sequences;
  if (g.linear_state_bytes_per_sequence > 0) {
    p.linear_state_slots_total = g.max_sequences;
    p.linear_state_slots_used = pool.linear_slots_used;
  }
  const EngineStats stats = core_->Stats();
  p.prefix_query_tokens_total = stats.prefix_query_tokens;
  p.prefix_hit_tokens_total = stats.prefix_hit_tokens;
  p.cached_pages = pool.cached_pages;
  if (absl::Status s = metrics_->RecordPool(p); !s.ok()) {
    std::fprintf(stderr, "pdserve engine: pool metrics: %s\n",
                 std::string(s.message()).c_str());
  }
}

}  // namespace pdserve::service
