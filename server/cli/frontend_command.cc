// `pdserve frontend`: one public front end process.
#include <cstdio>

#include "scheduler/cli_args.h"
#include "server/cli/command.h"
#include "proto/rpc_util.h"
#include "server/frontend/frontend_service.h"

namespace pdserve::cli {
namespace {

int RunFrontend(int argc, char** argv) {
  rpc::BlockTerminationSignals();
  const auto& flags = frontend::FrontendFlags();
  auto args = CliArgs::Parse(argc, argv, flags);
  if (args.ok() && !args->help()) {
    if (absl::Status s = args->ApplyConfigFile("frontend", flags); !s.ok()) {
      args = s;
    }
  }
  if (!args.ok()) {
    std::fprintf(stderr, "pdserve frontend: %s\n",
                 std::string(args.status().message()).c_str());
    return 2;
  }
  if (args->help()) {
    std::printf("usage: pdserve frontend --model PATH [--scheduler ADDR] [options]\n%s",
                CliArgs::Usage(flags).c_str());
    return 0;
  }
  return frontend::RunFrontendProcess(*args);
}

}  // namespace

PDSERVE_COMMAND(frontend, "run the public gRPC front end process", RunFrontend);

}  // namespace pdserve::cli
