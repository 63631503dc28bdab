// --device through the real `pdserve` binary: a bad device is a usage error
// (exit 2); --device cuda without a plugin, or with a plugin but no device,
// exits 1 with a message naming what is missing (generate and engine); and
// with the test plugin (PDSERVE_CUDA_PLUGIN) generate on "cuda" prints the
// greedy ids of --device cpu.

#include <cstdio>
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/cli_run.h"

namespace {

using ::testing::HasSubstr;

const std::string kBinary =
    std::string(PDSERVE_BINARY_DIR) + "/server/cli/pdserve";
const std::string kStories =
    std::string(PDSERVE_SHARED_DIR) + "/models/stories260K/stories260K.bin";
const std::string kTok =
    std::string(PDSERVE_SHARED_DIR) + "/models/stories260K/tok512.bin";

using Result = ::pdserve::testing::CliResult;

// Runs `env pdserve args` (env: "NAME=value ..." or empty).
Result RunPdserve(const std::string& env, const std::string& args) {
  return ::pdserve::testing::RunCli(env, kBinary, args);
}

class BackendCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kBinary)) GTEST_SKIP() << kBinary << " absent";
    if (!std::filesystem::exists(kStories)) {
      GTEST_SKIP() << kStories << " absent";
    }
  }
  std::string Generate(const std::string& device) const {
    return "generate --model " + kStories + " --tokenizer " + kTok +
           " --prompt-ids '1 403 407 261 378' -n 24 --ids --threads 2"
           " --batch 3 --device " +
           device;
  }
};

TEST_F(BackendCliTest, BadDeviceIsAUsageError) {
  Result r = RunPdserve("", Generate("tpu"));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("device 'tpu' is not a known device"));
  Result e = RunPdserve(
      "", "engine --model " + kStories + " --port 0 --device cuda:x");
  EXPECT_EQ(e.code, 1);
  EXPECT_THAT(e.err, HasSubstr("device 'cuda:x' has a bad device index"));
}

TEST_F(BackendCliTest, CudaWithoutPluginOrDeviceExitsWithAMessage) {
  // No plugin at the given path. (A real libpdserve_cuda.so elsewhere on the
  // search list loads and then fails for want of a GPU: also exit 1.)
  const std::string env =
      "PDSERVE_CUDA_PLUGIN=/nonexistent/pdserve/libpdserve_cuda.so";
  Result r = RunPdserve(env, Generate("cuda"));
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("pdserve generate: "));
  EXPECT_THAT(r.err, HasSubstr("libpdserve_cuda.so"));
  EXPECT_TRUE(r.out.empty()) << r.out;

  Result e =
      RunPdserve(env, "engine --model " + kStories + " --port 0 --device cuda");
  EXPECT_EQ(e.code, 1) << e.err;
  EXPECT_THAT(e.err,
              HasSubstr("pdserve engine: creating the engine on cuda:0"));
  EXPECT_THAT(e.err, HasSubstr("libpdserve_cuda.so"));

  // serve checks the device before starting children (which it would
  // otherwise restart forever).
  Result s = RunPdserve(env, "serve --model " + kStories + " --tokenizer " +
                                 kTok + " --device cuda:1");
  EXPECT_EQ(s.code, 1) << s.err;
  EXPECT_THAT(s.err, HasSubstr("pdserve serve: --device cuda:1: "));
  EXPECT_THAT(s.err, HasSubstr("libpdserve_cuda.so"));
  EXPECT_THAT(s.err, ::testing::Not(HasSubstr("restart")));
  Result bad = RunPdserve("", "serve --model " + kStories + " --device cuda1");
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("device 'cuda1' is not a known device"));
}

TEST_F(BackendCliTest, PluginWithoutDeviceNamesTheDriverError) {
  const std::string env = std::string("PDSERVE_CUDA_PLUGIN=") +
                          PDSERVE_TEST_PLUGIN + " PDSERVE_TEST_PLUGIN_FAIL=1";
  Result r = RunPdserve(env, Generate("cuda"));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("no CUDA-capable device is detected"));
  Result e =
      RunPdserve(env, "engine --model " + kStories + " --port 0 --device cuda");
  EXPECT_EQ(e.code, 1);
  EXPECT_THAT(e.err, HasSubstr("no CUDA-capable device is detected"));
  Result s = RunPdserve(env, "serve --model " + kStories + " --tokenizer " +
                                 kTok + " --device cuda");
  EXPECT_EQ(s.code, 1);
  EXPECT_THAT(s.err, HasSubstr("no CUDA-capable device is detected"));
}

TEST_F(BackendCliTest, GenerateOnThePluginMatchesCpu) {
  Result cpu = RunPdserve("", Generate("cpu"));
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  Result dev =
      RunPdserve(std::string("PDSERVE_CUDA_PLUGIN=") + PDSERVE_TEST_PLUGIN,
                 Generate("cuda:0"));
  ASSERT_EQ(dev.code, 0) << dev.err;
  EXPECT_EQ(dev.out, cpu.out);
  EXPECT_GE(std::count(cpu.out.begin(), cpu.out.end(), ' '), 5);
  EXPECT_THAT(dev.err, HasSubstr("test-plugin:0"));
  EXPECT_THAT(cpu.err, HasSubstr("kernels, cpu"));
}

}  // namespace
