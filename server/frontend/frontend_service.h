// The public front end: pdserve.v1.Inference over the scheduler's internal
// API (callback API: no thread per stream), and the frontend process.
#ifndef PDSERVE_SERVER_FRONTEND_FRONTEND_SERVICE_H_
#define PDSERVE_SERVER_FRONTEND_FRONTEND_SERVICE_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "pdserve/v1/api.grpc.pb.h"
#include "pdserve/v1/scheduler.grpc.pb.h"
#include "config/process_options.h"
#include "server/frontend/generation_stream.h"
#include "server/frontend/request_prep.h"
#include "common/metrics/frontend_metrics.h"

namespace pdserve::frontend {

// Serves Generate (validate, template, tokenize, submit, incremental
// detokenize with stop strings, cancel the scheduler request when the
// client goes away), Tokenize, Detokenize and ListModels. Thread-safe; the
// model context and the scheduler stub must outlive it. The capacity
// (model->max_seq_len) is read once per request; the process keeps it equal
// to the engine's.
// Generate is registered raw (ByteBuffer in and out) so that a request whose
// string fields hold invalid UTF-8, which protobuf refuses to parse, gets
// INVALID_ARGUMENT naming the field and byte offset instead of a transport
// error.
class InferenceServiceImpl final
    : public v1::Inference::WithRawCallbackMethod_Generate<
          v1::Inference::CallbackService> {
 public:
  // `metrics` (not owned, may be null, must outlive the service) receives
  // every Generate call: start, tokenizer time, inter-token gaps, stream
  // write stalls and the finished request.
  // `cells` (not owned) routes each request to a scheduler.
  InferenceServiceImpl(const ModelContext* model, CellRouter* cells,
                       metrics::FrontendMetrics* metrics = nullptr);

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(
      grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* ctx,
                                     const v1::TokenizeRequest* req,
                                     v1::TokenizeResponse* resp) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* ctx,
                                       const v1::DetokenizeRequest* req,
                                       v1::DetokenizeResponse* resp) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx,
                                       const v1::ListModelsRequest* req,
                                       v1::ListModelsResponse* resp) override;

  // While draining, new Generate calls get UNAVAILABLE.
  void SetDraining(bool draining) { draining_ = draining; }
  // Generate streams open now.
  int active_streams() const { return active_; }
  // What a GenerationStream of this front end needs.
  GenerationContext generation_context() const {
    return {model_, cells_, metrics_, scheduler_recovery_,
            pd_min_prompt_tokens_};
  }
  // --scheduler-recovery-seconds (before the first request).
  void set_scheduler_recovery(std::chrono::milliseconds recovery) {
    scheduler_recovery_ = recovery;
  }
  // --pd-min-prompt-tokens (GenerationContext::pd_min_prompt_tokens).
  void set_pd_min_prompt_tokens(int64_t tokens) {
    pd_min_prompt_tokens_ = tokens;
  }

 private:
  friend class GenerateCall;
  const ModelContext* model_;
  CellRouter* cells_;
  metrics::FrontendMetrics* metrics_;
  std::chrono::milliseconds scheduler_recovery_{30000};
  int64_t pd_min_prompt_tokens_ = 256;
  std::atomic<bool> draining_{false};
  std::atomic<int> active_{0};
};

// Runs the front end process until SIGTERM/SIGINT (then drains: no new
// requests, open streams get up to --drain-seconds). Prints
// "pdserve frontend: serving MODEL on HOST:PORT" once the scheduler has
// reported the model and the server listens.
int RunFrontendProcess(const config::FrontendProcessOptions& options);

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_FRONTEND_SERVICE_H_
