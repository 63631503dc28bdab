// `pdserve scheduler`: one scheduler process (queues, policy loop).
#include <cstdio>

#include "proto/rpc_util.h"
#include "scheduler/cli_args.h"
#include "scheduler/scheduler_service.h"
#include "server/cli/command.h"

namespace pdserve::cli {
namespace {

int RunScheduler(int argc, char** argv) {
  rpc::BlockTerminationSignals();
  const auto& flags = scheduler::SchedulerFlags();
  auto args = CliArgs::Parse(argc, argv, flags);
  if (args.ok() && !args->help()) {
    if (absl::Status s = args->ApplyConfigFile("scheduler", flags); !s.ok()) {
      args = s;
    }
  }
  if (!args.ok()) {
    std::fprintf(stderr, "pdserve scheduler: %s\n",
                 std::string(args.status().message()).c_str());
    return 2;
  }
  if (args->help()) {
    std::printf("usage: pdserve scheduler [--engine ADDR] [options]\n%s",
                CliArgs::Usage(flags).c_str());
    return 0;
  }
  return scheduler::RunSchedulerProcess(*args);
}

}  // namespace

PDSERVE_COMMAND(scheduler, "run the scheduler process (queues, chunked prefill) over gRPC",
                RunScheduler);

}  // namespace pdserve::cli
