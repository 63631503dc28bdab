// Subcommands of the `pdserve` binary.
#ifndef PDSERVE_SERVER_CLI_COMMAND_H_
#define PDSERVE_SERVER_CLI_COMMAND_H_

namespace pdserve::cli {

// A subcommand: `pdserve <name> [args...]`. run() receives argv with argv[0]
// set to "pdserve <name>" and returns the process exit code (0 success, 2
// usage error, 1 other failure). It prints its own errors on stderr.
struct Command {
  const char* name;
  const char* summary;  // one line for `pdserve --help`
  int (*run)(int argc, char** argv);
};

// Registers a command at static-initialisation time (see PDSERVE_COMMAND).
bool RegisterCommand(const Command& command);

}  // namespace pdserve::cli

// In a *_command.cc file:  PDSERVE_COMMAND(generate, "summary", RunGenerate);
#define PDSERVE_COMMAND(name, summary, fn)                       \
  static const bool pdserve_command_registered_##name =          \
      ::pdserve::cli::RegisterCommand({#name, summary, fn})

#endif  // PDSERVE_SERVER_CLI_COMMAND_H_
