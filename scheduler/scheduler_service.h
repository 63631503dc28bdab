// The scheduler process's gRPC service (pdserve.v1.Scheduler, callback API:
// no thread per stream) over a SchedulerShell, and the process itself.
#ifndef PDSERVE_SCHEDULER_SCHEDULER_SERVICE_H_
#define PDSERVE_SCHEDULER_SCHEDULER_SERVICE_H_

#include <vector>

#include "pdserve/v1/scheduler.grpc.pb.h"
#include "config/process_options.h"
#include "scheduler/scheduler_shell.h"
#include "scheduler/status_watch.h"

namespace pdserve::scheduler {

// Thread-safe; the shell must outlive the service. StopWatches() before
// the server shuts down, so open WatchStatus streams do not hold it up.
class SchedulerServiceImpl final : public v1::Scheduler::CallbackService {
 public:
  explicit SchedulerServiceImpl(SchedulerShell* shell)
      : shell_(shell), watches_([shell] { return shell->Status(); }) {}

  grpc::ServerWriteReactor<v1::TokenEvent>* Submit(
      grpc::CallbackServerContext* ctx, const v1::SubmitRequest* req) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx,
                                      const v1::GetStatusRequest* req,
                                      v1::SchedulerStatus* resp) override;
  grpc::ServerWriteReactor<v1::SchedulerStatus>* WatchStatus(
      grpc::CallbackServerContext* ctx,
      const v1::WatchStatusRequest* req) override;
  void StopWatches() { watches_.Stop(); }

 private:
  SchedulerShell* shell_;
  StatusWatchHub watches_;
};

// Runs the scheduler process until SIGTERM/SIGINT; returns the exit code.
// Prints "pdserve scheduler: listening on HOST:PORT" once it serves.
int RunSchedulerProcess(const config::SchedulerProcessOptions& options);

}  // namespace pdserve::scheduler

#endif  // PDSERVE_SCHEDULER_SCHEDULER_SERVICE_H_
