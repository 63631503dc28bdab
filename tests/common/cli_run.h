// Runs a command line for CLI tests and captures its exit code, stdout and
// stderr. Thread-compatible; safe across ctest's parallel test processes
// (stderr goes through a file named after the calling process).
#ifndef PDSERVE_TESTS_COMMON_CLI_RUN_H_
#define PDSERVE_TESTS_COMMON_CLI_RUN_H_

#include <string>

namespace pdserve::testing {

struct CliResult {
  int code = -1;  // exit status; -1 when the command could not run or died
  std::string out, err;
};

// Runs `env binary args` through /bin/sh with stdin from /dev/null. `env` is
// "NAME=value ..." or empty; `args` is shell text (quote as needed).
CliResult RunCli(const std::string& env, const std::string& binary,
                 const std::string& args);

// The whole file, or "" when it cannot be read.
std::string ReadWholeFile(const std::string& path);

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_COMMON_CLI_RUN_H_
