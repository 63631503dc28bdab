// `pdserve engine`: one engine process (model, KV pools, step executor).
#include <cstdio>

#include "scheduler/cli_args.h"
#include "server/cli/command.h"
#include "engine/service/engine_process.h"
#include "proto/rpc_util.h"

namespace pdserve::cli {
namespace {

int RunEngine(int argc, char** argv) {
  rpc::BlockTerminationSignals();
  const auto& flags = service::EngineFlags();
  auto args = CliArgs::Parse(argc, argv, flags);
  if (args.ok() && !args->help()) {
    if (absl::Status s = args->ApplyConfigFile("engine", flags); !s.ok()) {
      args = s;
    }
  }
  if (!args.ok()) {
    std::fprintf(stderr, "pdserve engine: %s\n",
                 std::string(args.status().message()).c_str());
    return 2;
  }
  if (args->help()) {
    std::printf("usage: pdserve engine --model PATH [options]\n%s",
                CliArgs::Usage(flags).c_str());
    return 0;
  }
  return service::RunEngineProcess(*args);
}

}  // namespace

PDSERVE_COMMAND(engine, "run the engine process (model, KV pools, steps) over gRPC",
                RunEngine);

}  // namespace pdserve::cli
