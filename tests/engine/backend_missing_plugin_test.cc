// The plugin loader when no CUDA plugin exists anywhere it looks. This binary
// compiles its own copy of engine/backend/backend_loader.cc without the build
// tree's plugin folder on the search list and lives in a folder of its own
// (tests/engine/no_plugin), so it runs, never skips, in a build that also
// made libpdserve_cuda.so (PDSERVE_CUDA=ON, as CI builds): --device cuda
// must then fail with FAILED_PRECONDITION naming every path it tried.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/backend/backend_loader.h"
#include "engine/backend/device_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/env_guard.h"

namespace pdserve {
namespace {

using ::pdserve::testing::EnvGuard;
using ::testing::HasSubstr;
using ::testing::Not;

const DeviceSpec kCuda0{DeviceSpec::Kind::kCuda, 0};

// The premise: nothing this binary searches exists (else the test would
// be about a plugin that loads, which backend_test covers).
void ExpectNoPluginOnTheSearchList(const std::vector<std::string>& paths) {
  ASSERT_GE(paths.size(), 2u);
  for (const std::string& path : paths) {
    EXPECT_FALSE(std::filesystem::exists(path)) << path;
    EXPECT_THAT(path, Not(HasSubstr("kernels/cuda/plugin"))) << path;
  }
}

void ExpectNamesEveryPath(const absl::Status& status,
                          const std::vector<std::string>& paths) {
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  const std::string msg(status.message());
  EXPECT_THAT(msg, HasSubstr("--device cuda:0 needs the CUDA plugin "
                             "libpdserve_cuda.so"));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("tried ", paths.size(),
                                          " location(s)")));
  for (const std::string& path : paths) {
    EXPECT_THAT(msg, HasSubstr(path + ": no such file"));
  }
  EXPECT_THAT(msg, HasSubstr("PDSERVE_CUDA_PLUGIN"));
}

TEST(MissingPluginTest, DefaultSearchListNamesEveryPathTried) {
  EnvGuard env("PDSERVE_CUDA_PLUGIN", nullptr);
  const std::vector<std::string> paths = PluginSearchPaths(kCuda0);
  ExpectNoPluginOnTheSearchList(paths);
  EXPECT_THAT(paths[0], HasSubstr("/tests/engine/no_plugin/"));
  auto plugin = LoadBackendPlugin(kCuda0, BackendOptions{});
  ASSERT_FALSE(plugin.ok()) << "loaded " << (*plugin)->path();
  ExpectNamesEveryPath(plugin.status(), paths);
}

TEST(MissingPluginTest, EnvironmentPathIsTriedFirst) {
  EnvGuard env("PDSERVE_CUDA_PLUGIN", "/nonexistent/pdserve/libpdserve_cuda.so");
  const std::vector<std::string> paths = PluginSearchPaths(kCuda0);
  ExpectNoPluginOnTheSearchList(paths);
  EXPECT_EQ(paths[0], "/nonexistent/pdserve/libpdserve_cuda.so");
  auto plugin = LoadBackendPlugin(kCuda0, BackendOptions{});
  ASSERT_FALSE(plugin.ok()) << "loaded " << (*plugin)->path();
  ExpectNamesEveryPath(plugin.status(), paths);
}

TEST(MissingPluginTest, DeviceQueryFailsTheSameWay) {
  EnvGuard env("PDSERVE_CUDA_PLUGIN", nullptr);
  auto info = QueryDevice(kCuda0, BackendOptions{});
  ASSERT_FALSE(info.ok());
  ExpectNamesEveryPath(info.status(), PluginSearchPaths(kCuda0));
}

}  // namespace
}  // namespace pdserve
