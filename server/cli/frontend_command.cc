// `pdserve frontend`: one public front end process.
#include "common/process/process.h"
#include "config/process_options.h"
#include "server/cli/command.h"
#include "server/cli/process_command.h"
#include "server/frontend/frontend_service.h"

namespace pdserve::cli {
namespace {

int RunFrontend(int argc, char** argv) {
  process::BlockTerminationSignals();
  return RunProcessCommand(
      "frontend", "pdserve frontend --model PATH [--scheduler ADDR] [options]",
      config::FrontendFlagTable(), argc, argv, &frontend::RunFrontendProcess);
}

}  // namespace

PDSERVE_COMMAND(frontend, "run the public gRPC front end process", RunFrontend);

}  // namespace pdserve::cli
