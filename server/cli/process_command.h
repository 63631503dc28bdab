// The entry of the serving subcommands (engine, scheduler, frontend, serve):
// their flags come through the configuration door (config/flag_table.h) as
// a typed options struct.
#ifndef PDSERVE_SERVER_CLI_PROCESS_COMMAND_H_
#define PDSERVE_SERVER_CLI_PROCESS_COMMAND_H_

#include <cstdio>
#include <string>

#include "config/flag_table.h"

namespace pdserve::cli {

// Resolves argv through `table` (flag > env > config file > default) and
// calls run(options). --help prints `usage` and the generated flag list
// (exit 0); a bad flag, env value or config file prints
// "pdserve <command>: <message>" on stderr and returns 2.
template <typename Options>
int RunProcessCommand(const char* command, const char* usage,
                      const config::FlagTable<Options>& table, int argc,
                      char** argv, int (*run)(const Options&)) {
  auto parsed =
      config::ParseCommand(table, argc, argv, config::Layers::Process());
  if (!parsed.ok()) {
    std::fprintf(stderr, "pdserve %s: %s\n", command,
                 std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (parsed->resolution.help) {
    std::printf("usage: %s\n%s", usage, table.Usage().c_str());
    return 0;
  }
  return run(parsed->options);
}

}  // namespace pdserve::cli

#endif  // PDSERVE_SERVER_CLI_PROCESS_COMMAND_H_
