// `pdserve engine`: one engine process (model, KV pools, step executor).
#include "common/process/process.h"
#include "config/process_options.h"
#include "engine/service/engine_process.h"
#include "server/cli/command.h"
#include "server/cli/process_command.h"

namespace pdserve::cli {
namespace {

int RunEngine(int argc, char** argv) {
  process::BlockTerminationSignals();
  return RunProcessCommand("engine", "pdserve engine --model PATH [options]",
                           config::EngineFlagTable(), argc, argv,
                           &service::RunEngineProcess);
}

}  // namespace

PDSERVE_COMMAND(engine, "run the engine process (model, KV pools, steps) over gRPC",
                RunEngine);

}  // namespace pdserve::cli
