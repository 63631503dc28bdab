// The engine process's gRPC service (pdserve.v1.Engine) over one EngineCore.
#ifndef PDSERVE_ENGINE_SERVICE_ENGINE_SERVICE_H_
#define PDSERVE_ENGINE_SERVICE_ENGINE_SERVICE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "engine/core/engine_core.h"
#include "engine/kv/kv_handoff.h"
#include "engine/grammar/grammar.h"
#include "engine/service/handoff_shm.h"
#include "pdserve/v1/engine.grpc.pb.h"
#include "common/metrics/engine_metrics.h"

namespace pdserve::service {

// Converts API sampling parameters to the sampler's (zero fields mean the
// sampler's defaults: top_p 1, repetition_penalty 1, seed 0).
SamplingParams ToSamplingParams(const v1::SamplingParams& p);

// Serves one EngineCore. Thread-safe: every call takes one mutex, so the
// engine executes one step (or add / release) at a time, in arrival order.
// The core must outlive the service. Errors are the core's absl::Status,
// mapped code for code (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ...).
// With metrics attached, every step that processed tokens is recorded
// (duration, tokens, batch, bytes moved) together with a pool snapshot.
class EngineServiceImpl final : public v1::Engine::Service {
 public:
  EngineServiceImpl(EngineCore* core, std::string model_name,
                    std::string backend, int64_t max_step_tokens);

  grpc::Status GetInfo(grpc::ServerContext* ctx, const v1::GetInfoRequest* req,
                       v1::EngineInfo* resp) override;
  // Executes the stream's requests in order (releases, admissions, step),
  // one response each; ends with the first failing step's status. Reads
  // ahead: cancel_ids are applied at the next step boundary, before the
  // requests already queued.
  grpc::Status StepStream(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::StepResponse, v1::StepRequest>* stream)
      override;

  // Prefill/decode hand-off (engine_handoff.cc). ExportKv streams a
  // hand-off this engine kept (AddSequenceRequest.export_kv); ImportKv
  // fetches one from another engine, validates it (ValidateHandoff) and
  // stages it for AddSequenceRequest.import_id. Both run beside the steps
  // (they take the step lock only to read nothing: the shape and capacity
  // are fixed at construction).
  grpc::Status ExportKv(grpc::ServerContext* ctx,
                        const v1::ExportKvRequest* req,
                        grpc::ServerWriter<v1::KvChunk>* writer) override;
  // Same-host hand-offs go through shared memory unless turned off here
  // (--no-shm-handoff; on by default). Call before serving.
  void set_shared_memory_handoff(bool on);
  grpc::Status ImportKv(grpc::ServerContext* ctx,
                        const v1::ImportKvRequest* req,
                        v1::ImportKvResponse* resp) override;
  // Records every later step into `metrics` (not owned; must outlive the
  // service; null detaches). Safe to call while serving.
  void AttachMetrics(metrics::EngineMetrics* metrics);

  // Compiles the admissions' sampling.constraint (not owned; must outlive
  // the service). Without one, a constrained admission is refused
  // (FAILED_PRECONDITION). Call before serving.
  void SetGrammarCompiler(grammar::GrammarCompiler* compiler) {
    grammar_ = compiler;
  }

 private:
  // Releases, then admissions, then the step of `req`.
  grpc::Status ExecuteLocked(const v1::StepRequest& req,
                             v1::StepResponse* resp);
  void AdmitLocked(const v1::StepRequest& req, v1::StepResponse* resp);
  // Releases each of `ids` the core holds and marks it (and any whose
  // admission is in `queued`) cancelled; adds them to `owned`; clears `ids`.
  void ApplyCancels(std::vector<uint64_t>* ids,
                    const std::deque<v1::StepRequest>& queued,
                    absl::flat_hash_set<uint64_t>* owned);
  absl::Status AddLocked(const v1::AddSequenceRequest& req);
  // AddSequenceRequest.export_kv / import_id for a sequence just added.
  absl::Status ApplyHandoffLocked(const v1::AddSequenceRequest& req);
  // Moves the core's finished exports to exports_, naming each in `resp`.
  void StoreExportsLocked(v1::StepResponse* resp);
  // A channel to another engine (cached per address).
  std::shared_ptr<grpc::Channel> PeerChannel(const std::string& target);
  // Feeds the step just run (result_, plan_) and the pool to metrics_.
  void RecordStepLocked(int64_t prefill, int64_t decode);

  std::mutex mu_;
  EngineCore* const core_ ABSL_PT_GUARDED_BY(mu_);
  grammar::GrammarCompiler* grammar_ = nullptr;  // thread-safe itself
  std::string model_name_;
  std::string backend_;
  int64_t max_step_tokens_;
  StepResult result_ ABSL_GUARDED_BY(mu_);  // reused across steps
  std::vector<StepPlanEntry> plan_ ABSL_GUARDED_BY(mu_);
  // Admissions refused in a StepRequest: their items are skipped until a
  // release names them.
  absl::flat_hash_set<uint64_t> rejected_ ABSL_GUARDED_BY(mu_);
  // Sequences cancelled out of band (StepRequest.cancel_ids): their items
  // and admissions are skipped until a release names them.
  absl::flat_hash_set<uint64_t> cancelled_ ABSL_GUARDED_BY(mu_);
  metrics::EngineMetrics* metrics_ ABSL_GUARDED_BY(mu_) = nullptr;  // not owned
  // Hand-offs kept for a decode engine to fetch, and ones fetched here for
  // an admission: at most 1 GiB each, for 60 s.
  const KvHandoffShape handoff_shape_;
  const int64_t capacity_;
  HandoffTable exports_, imports_;
  std::mutex peers_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> peers_
      ABSL_GUARDED_BY(peers_mu_);
  // Same-host hand-offs through shared memory (handoff_shm.h): this
  // process's identity ("" = off) and the objects written, not yet taken.
  std::string shm_host_id_;
  SharedMemoryLeases shm_leases_;
};

}  // namespace pdserve::service

#endif  // PDSERVE_ENGINE_SERVICE_ENGINE_SERVICE_H_
