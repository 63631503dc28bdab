// The scheduler's side of the prefill/decode hand-off: a decode cell has
// its engine fetch a prefill cell's KV before queueing the request
// (falling back to a local prefill when the engine refuses it), and a
// prefill cell ends a prefill_only request with where its KV waits.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "scheduler/scheduler_shell.h"

namespace pdserve::scheduler {

void SchedulerShell::StartImport(uint64_t id, Request r) {
  struct Call {
    grpc::ClientContext ctx;
    v1::ImportKvRequest req;
    v1::ImportKvResponse resp;
    Request request;
  };
  auto call = std::make_shared<Call>();
  call->ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
  call->req.set_source(r.spec.kv_source().engine());
  call->req.set_handoff_id(r.spec.kv_source().handoff_id());
  call->request = std::move(r);
  import_stub_->async()->ImportKv(
      &call->ctx, &call->req, &call->resp,
      [this, id, call](grpc::Status status) {
        FinishImport(id, std::move(call->request), status, call->resp);
      });
}

void SchedulerShell::FinishImport(uint64_t id, Request r,
                                  const grpc::Status& status,
                                  const v1::ImportKvResponse& resp) {
  if (status.ok()) {
    r.import_id = resp.import_id();
    r.imported_tokens = resp.tokens();
    ++handoffs_imported_;
    if (resp.shared_memory()) ++handoffs_shared_memory_;
    if (options_.metrics != nullptr) {
      options_.metrics->RecordHandoff(true, resp.transfer_ms() / 1e3,
                                      resp.bytes());
    }
  } else {
    // Another capacity, layout or model, or the KV is gone: prefill here.
    ++handoffs_refused_;
    if (options_.metrics != nullptr) options_.metrics->RecordHandoff(false, 0, 0);
    std::fprintf(stderr,
                 "pdserve scheduler: KV hand-off of %s refused (%s); "
                 "prefilling it here\n",
                 r.spec.request_id().c_str(), status.error_message().c_str());
  }
  std::lock_guard<std::mutex> lock(mu_);
  importing_.erase(id);
  if (import_cancels_.erase(id) > 0 || stop_) {
    r.sink->Close(grpc::Status(grpc::StatusCode::CANCELLED,
                               "the request was cancelled"));
  } else {
    EnqueueLocked(id, std::move(r));
  }
  cv_.notify_all();
}

v1::TokenEvent SchedulerShell::PrefillDoneEvent(const Request& r) const {
  v1::TokenEvent event;
  v1::KvHandoffRef* done = event.mutable_prefill_done();
  done->set_engine(options_.engine_advertise);
  done->set_handoff_id(r.handoff_id);
  done->set_tokens(r.spec.prompt_ids_size());
  event.mutable_usage()->set_prompt_tokens(r.spec.prompt_ids_size());
  event.mutable_usage()->set_completion_tokens(
      static_cast<int32_t>(r.generated.size()));
  event.mutable_usage()->set_cached_tokens(r.cached_tokens);
  return event;
}

}  // namespace pdserve::scheduler
