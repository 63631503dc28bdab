// The cuBLAS/civetweb pitfall of ../shared/notes/toolchain.md, reproduced with
// a fixture library holding 120 KiB of TLS (built twice):
//  - METRICS_TLS_LINKED: the fixture is linked into the process; civetweb's
//    small thread stacks may not fit the static TLS. Start() then fails, and
//    its message must carry the plugin hint (it succeeds on platforms whose
//    thread stacks are large enough; then it must serve).
//  - otherwise the fixture is dlopen()ed, as pdserve loads its CUDA backend:
//    the Exposer must start and serve.
#include <dlfcn.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/metrics/metrics_server.h"

extern "C" int pdserve_bigtls_touch(int i);

namespace pdserve::metrics {
namespace {

using ::testing::HasSubstr;

#ifdef METRICS_TLS_LINKED
TEST(MetricsTlsTest, LinkedBigTlsFailsWithThePluginHint) {
  ASSERT_EQ(pdserve_bigtls_touch(7), 7);
  auto server = MetricsServer::Start({.port = 0, .process = "engine"});
  if (server.ok()) {
    EXPECT_GT((*server)->port(), 0);
    GTEST_SKIP() << "this platform's civetweb thread stacks fit 120 KiB of "
                    "static TLS; the pitfall does not occur here";
  }
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(server.status().message(), HasSubstr("plugin"));
}
#else
TEST(MetricsTlsTest, DlopenedBigTlsLeavesTheExposerWorking) {
  void* lib = dlopen(METRICS_BIGTLS_FIXTURE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto touch =
      reinterpret_cast<int (*)(int)>(dlsym(lib, "pdserve_bigtls_touch"));
  ASSERT_NE(touch, nullptr);
  EXPECT_EQ(touch(5), 5);
  auto server = MetricsServer::Start({.port = 0, .process = "engine"});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_GT((*server)->port(), 0);
}
#endif

}  // namespace
}  // namespace pdserve::metrics
