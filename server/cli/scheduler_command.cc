// `pdserve scheduler`: one scheduler process (queues, policy loop).
#include "common/process/process.h"
#include "config/process_options.h"
#include "scheduler/scheduler_service.h"
#include "server/cli/command.h"
#include "server/cli/process_command.h"

namespace pdserve::cli {
namespace {

int RunScheduler(int argc, char** argv) {
  process::BlockTerminationSignals();
  return RunProcessCommand("scheduler",
                           "pdserve scheduler [--engine ADDR] [options]",
                           config::SchedulerFlagTable(), argc, argv,
                           &scheduler::RunSchedulerProcess);
}

}  // namespace

PDSERVE_COMMAND(scheduler, "run the scheduler process (queues, chunked prefill) over gRPC",
                RunScheduler);

}  // namespace pdserve::cli
