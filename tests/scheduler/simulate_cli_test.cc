// `pdserve simulate`: the command's run function linked in directly; a small
// trace replayed through the real policy, the flags reaching it, and bad
// input refused with exit 2 and the numbers.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/cli/command.h"

namespace pdserve::cli {
namespace {
Command g_simulate{};
}  // namespace

// Stands in for main.cc's registry: keeps the simulate command.
bool RegisterCommand(const Command& command) {
  if (!std::strcmp(command.name, "simulate")) g_simulate = command;
  return true;
}

namespace {

using ::testing::HasSubstr;

struct Result {
  int code;
  std::string out, err;
};

Result RunSimulate(std::vector<std::string> args) {
  args.insert(args.begin(), "pdserve simulate");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int code = g_simulate.run(static_cast<int>(argv.size()), argv.data());
  std::string out = ::testing::internal::GetCapturedStdout();
  return {code, out, ::testing::internal::GetCapturedStderr()};
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/simulate_cli_" +
                     std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}

class SimulateCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(g_simulate.run, nullptr);
    // Ten requests of 100 prompt + 20 output tokens, 10 ms apart.
    std::string csv;
    for (int i = 0; i < 10; ++i) {
      csv += std::to_string(i * 0.01) + ",100,20\n";
    }
    trace_ = WriteTemp("trace.csv", csv);
  }
  std::string trace_;
};

TEST_F(SimulateCliTest, ReplaysTheTraceWithTheGivenCostModel) {
  Result r = RunSimulate({"--trace", trace_, "--json", "--fixed-ms", "1",
                          "--prefill-token-ms", "0.01", "--decode-seq-ms",
                          "0.1"});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["requests"], 10);
  EXPECT_EQ(j["completed"], 10);
  EXPECT_EQ(j["rejected"], 0);
  EXPECT_DOUBLE_EQ(j["cost_model"]["fixed_ms"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["cost_model"]["prefill_token_ms"].get<double>(), 0.01);
  EXPECT_DOUBLE_EQ(j["cost_model"]["decode_seq_ms"].get<double>(), 0.1);
  EXPECT_GT(j["ttft_ms"]["p50"].get<double>(), 0);

  // A queue bound of 2 with one running sequence at a time rejects some.
  Result tight = RunSimulate({"--trace", trace_, "--json", "--max-running",
                              "1", "--max-queue", "2"});
  ASSERT_EQ(tight.code, 0) << tight.err;
  nlohmann::json t = nlohmann::json::parse(tight.out);
  EXPECT_GT(t["rejected"].get<int>(), 0);
  EXPECT_EQ(t["completed"].get<int>() + t["rejected"].get<int>(), 10);
}

TEST_F(SimulateCliTest, CalibrationFitsAndAFlagOverridesOneTerm) {
  // step_ms = 3 + 0.02 * prefill + 0.4 * decode, exactly.
  std::string csv = "prefill_tokens,decode_seqs,step_ms\n";
  for (auto [p, d] : {std::pair{0, 1}, {100, 0}, {200, 4}, {50, 8}, {0, 16}}) {
    csv += std::to_string(p) + "," + std::to_string(d) + "," +
           std::to_string(3 + 0.02 * p + 0.4 * d) + "\n";
  }
  const std::string samples = WriteTemp("steps.csv", csv);
  Result r = RunSimulate({"--trace", trace_, "--json", "--calibration",
                          samples, "--decode-seq-ms", "0.9"});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json cost = nlohmann::json::parse(r.out)["cost_model"];
  EXPECT_NEAR(cost["fixed_ms"].get<double>(), 3.0, 1e-6);
  EXPECT_NEAR(cost["prefill_token_ms"].get<double>(), 0.02, 1e-6);
  EXPECT_DOUBLE_EQ(cost["decode_seq_ms"].get<double>(), 0.9);
}

TEST_F(SimulateCliTest, EnvironmentReachesTheCommand) {
  ::setenv("PDSERVE_SIMULATE_FIXED_MS", "7.5", 1);
  Result r = RunSimulate({"--trace", trace_, "--json"});
  ::unsetenv("PDSERVE_SIMULATE_FIXED_MS");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_DOUBLE_EQ(
      nlohmann::json::parse(r.out)["cost_model"]["fixed_ms"].get<double>(),
      7.5);
}

TEST_F(SimulateCliTest, SimulatesASplitClusterAndPrintsASizingTable) {
  // Long prompts over the split threshold go to the prefill cell and are
  // handed to the decode cell.
  std::string csv;
  for (int i = 0; i < 12; ++i) {
    csv += std::to_string(i * 0.05) + (i % 2 ? ",600,16,0,1,512\n" : ",40,16\n");
  }
  const std::string trace = WriteTemp("split.csv", csv);
  Result r = RunSimulate({"--trace", trace, "--json", "--cells", "2",
                          "--prefill-cells", "1", "--pd-min-prompt-tokens",
                          "256", "--slo-ttft-ms", "100000", "--sizing", "4"});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["completed"], 12);
  EXPECT_EQ(j["handoffs"], 6);
  ASSERT_EQ(j["cells"].size(), 2u);
  EXPECT_EQ(j["cells"][0]["role"], "prefill");
  EXPECT_EQ(j["cells"][0]["routed"], 6);
  EXPECT_DOUBLE_EQ(j["slo_attainment"].get<double>(), 1.0);
  EXPECT_GT(j["prefix_hit_rate"].get<double>(), 0.3);  // 5 of 6 share 512
  ASSERT_EQ(j["sizing"].size(), 3u);  // 1, 2, 4 cells
  EXPECT_EQ(j["sizing"][0]["prefill_cells"], 0);
  EXPECT_EQ(j["sizing"][0]["handoffs"], 0);
  EXPECT_EQ(j["sizing"][2]["cells"], 4);
  EXPECT_EQ(j["sizing"][2]["prefill_cells"], 2);
  Result text = RunSimulate({"--trace", trace, "--cells", "2", "--sizing", "2"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("sizing (the same trace)"));
  EXPECT_THAT(text.out, HasSubstr("cells 2 (prefill 0)"));
}

TEST_F(SimulateCliTest, BadClusterFlagsAreUsageErrors) {
  Result split = RunSimulate({"--trace", trace_, "--cells", "2",
                              "--prefill-cells", "2"});
  EXPECT_EQ(split.code, 2);
  EXPECT_THAT(split.err, HasSubstr("prefill cells 2 must be less than cells 2"));
  Result router = RunSimulate({"--trace", trace_, "--router", "random"});
  EXPECT_EQ(router.code, 2);
  EXPECT_THAT(router.err, HasSubstr("--router random must be cache, prefix or round-robin"));
  Result fit = RunSimulate({"--trace", trace_, "--budget-fit", "x"});
  EXPECT_EQ(fit.code, 2);
  EXPECT_THAT(fit.err, HasSubstr("--budget-fit x"));
  Result noise = RunSimulate({"--trace", trace_, "--step-noise"});
  EXPECT_EQ(noise.code, 2);
  EXPECT_THAT(noise.err, HasSubstr("--step-noise needs --calibration"));
  Result calib = RunSimulate({"--trace", trace_, "--calibration",
                              WriteTemp("bad.csv", "1,2\n")});
  EXPECT_EQ(calib.code, 2);
  EXPECT_THAT(calib.err, HasSubstr("bad.csv: line 1: 2 columns"));
}

TEST_F(SimulateCliTest, BadInputIsAUsageError) {
  Result no_trace = RunSimulate({});
  EXPECT_EQ(no_trace.code, 2);
  EXPECT_THAT(no_trace.err, HasSubstr("usage: pdserve simulate --trace FILE"));
  Result zero = RunSimulate({"--trace", trace_, "--pages", "0"});
  EXPECT_EQ(zero.code, 2);
  EXPECT_THAT(zero.err, HasSubstr("--pages 0 must be >= 1"));
  Result missing = RunSimulate({"--trace", trace_ + ".absent"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err, HasSubstr("cannot open"));
  Result help = RunSimulate({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.out, HasSubstr("--itl-slowdown"));
}

}  // namespace
}  // namespace pdserve::cli
