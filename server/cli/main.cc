// The `pdserve` binary: dispatches to the registered subcommands.
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "server/cli/command.h"

namespace pdserve::cli {
namespace {

std::map<std::string, Command>& Registry() {
  static auto* registry = new std::map<std::string, Command>();
  return *registry;
}

void PrintUsage(FILE* out) {
  std::fprintf(out, "usage: pdserve <command> [options]\n\ncommands:\n");
  for (const auto& [name, command] : Registry()) {
    std::fprintf(out, "  %-10s %s\n", name.c_str(), command.summary);
  }
  std::fprintf(out, "\n'pdserve <command> --help' describes a command.\n");
}

}  // namespace

bool RegisterCommand(const Command& command) {
  Registry()[command.name] = command;
  return true;
}

}  // namespace pdserve::cli

int main(int argc, char** argv) {
  using pdserve::cli::Registry;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    pdserve::cli::PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  auto it = Registry().find(argv[1]);
  if (it == Registry().end()) {
    std::fprintf(stderr, "pdserve: unknown command '%s'\n\n", argv[1]);
    pdserve::cli::PrintUsage(stderr);
    return 2;
  }
  std::string name = std::string("pdserve ") + argv[1];
  argv[1] = name.data();
  return it->second.run(argc - 1, argv + 1);
}
