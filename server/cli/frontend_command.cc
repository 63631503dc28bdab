// `pdserve frontend`: one public front end process.
#include <cstdio>

#include "scheduler/cli_args.h"
#include "server/cli/command.h"
#ifdef PDSERVE_HAVE_FRONTEND
#include "proto/rpc_util.h"
#include "server/frontend/frontend_service.h"
#endif

namespace pdserve::cli {
namespace {

int RunFrontend(int argc, char** argv) {
#ifdef PDSERVE_HAVE_FRONTEND
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
#else
  std::fprintf(stderr, "pdserve frontend: this build has no front end\n");
  return 1;
#endif
}

}  // namespace

PDSERVE_COMMAND(frontend, "run the public gRPC front end process", RunFrontend);

}  // namespace pdserve::cli
