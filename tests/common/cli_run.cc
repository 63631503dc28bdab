#include "tests/common/cli_run.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace pdserve::testing {

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CliResult RunCli(const std::string& env, const std::string& binary,
                 const std::string& args) {
  // One file per process: ctest runs the cases of a suite in parallel.
  const std::string err_path = ::testing::TempDir() + "/pdserve_cli_stderr." +
                               std::to_string(getpid()) + ".txt";
  const std::string cmd =
      env + " " + binary + " " + args + " 2>" + err_path + " </dev/null";
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = ReadWholeFile(err_path);
  std::remove(err_path.c_str());
  return r;
}

}  // namespace pdserve::testing
