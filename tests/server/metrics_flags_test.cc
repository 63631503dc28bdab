// The shared /metrics flags of `pdserve engine|scheduler|frontend`.
#include "server/metrics/metrics_flags.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pdserve::metrics {
namespace {

std::vector<cli::FlagSpec> Specs(bool engine) {
  std::vector<cli::FlagSpec> specs = {{"host", true, "interface"},
                                      {"name", true, "model name"}};
  AppendMetricsFlags(specs, engine);
  return specs;
}

absl::StatusOr<cli::CliArgs> Parse(std::vector<std::string> words,
                                   bool engine = true) {
  std::vector<char*> argv;
  std::string self = "test";
  argv.push_back(self.data());
  for (std::string& w : words) argv.push_back(w.data());
  return cli::CliArgs::Parse(static_cast<int>(argv.size()), argv.data(),
                             Specs(engine));
}

TEST(MetricsFlagsTest, EngineOnlyDeclaresPeakBandwidth) {
  auto has = [](const std::vector<cli::FlagSpec>& specs, const char* name) {
    for (const auto& s : specs) {
      if (s.name == name) return true;
    }
    return false;
  };
  EXPECT_TRUE(has(Specs(true), "peak-memory-bandwidth"));
  EXPECT_FALSE(has(Specs(false), "peak-memory-bandwidth"));
  for (bool engine : {true, false}) {
    EXPECT_TRUE(has(Specs(engine), "metrics-port"));
    EXPECT_TRUE(has(Specs(engine), "metrics-host"));
    EXPECT_TRUE(has(Specs(engine), "vllm-metrics"));
  }
  auto args = Parse({"--peak-memory-bandwidth", "1e9"}, /*engine=*/false);
  EXPECT_FALSE(args.ok());
}

TEST(MetricsFlagsTest, NoPortMeansNoEndpoint) {
  auto args = Parse({"--vllm-metrics"});
  ASSERT_TRUE(args.ok()) << args.status();
  auto flags = MetricsFlagsFromArgs(*args, "m");
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_FALSE(flags->has_value());
}

TEST(MetricsFlagsTest, MapsEveryFlag) {
  auto args = Parse({"--host", "0.0.0.0", "--metrics-port", "9402",
                     "--vllm-metrics", "--peak-memory-bandwidth", "4.8e12"});
  ASSERT_TRUE(args.ok()) << args.status();
  auto flags = MetricsFlagsFromArgs(*args, "smol", /*probe_threads=*/6);
  ASSERT_TRUE(flags.ok()) << flags.status();
  ASSERT_TRUE(flags->has_value());
  const ProcessMetricsFlags& f = **flags;
  EXPECT_EQ(f.host, "0.0.0.0");  // --metrics-host defaults to --host
  EXPECT_EQ(f.port, 9402);
  EXPECT_TRUE(f.vllm_compat);
  EXPECT_EQ(f.model_name, "smol");
  EXPECT_DOUBLE_EQ(f.peak_memory_bandwidth, 4.8e12);
  EXPECT_EQ(f.probe_threads, 6);
}

TEST(MetricsFlagsTest, DefaultsAndMetricsHost) {
  auto args = Parse({"--host", "0.0.0.0", "--metrics-host", "127.0.0.1",
                     "--metrics-port", "0"});
  ASSERT_TRUE(args.ok()) << args.status();
  auto flags = MetricsFlagsFromArgs(*args, "", /*probe_threads=*/0);
  ASSERT_TRUE(flags.ok()) << flags.status();
  ASSERT_TRUE(flags->has_value());
  EXPECT_EQ((*flags)->host, "127.0.0.1");
  EXPECT_EQ((*flags)->port, 0);
  EXPECT_FALSE((*flags)->vllm_compat);
  EXPECT_EQ((*flags)->model_name, "pdserve");
  EXPECT_EQ((*flags)->peak_memory_bandwidth, 0.0);  // 0 = probe at start
  EXPECT_EQ((*flags)->probe_threads, 1);
}

TEST(MetricsFlagsTest, RejectsBadValuesNamingThem) {
  for (const auto& [flag, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"--metrics-port", "70000"},
           {"--metrics-port", "-1"},
           {"--metrics-port", "abc"},
           {"--peak-memory-bandwidth", "-5"},
           {"--peak-memory-bandwidth", "inf"}}) {
    std::vector<std::string> words = {flag + "=" + value};
    if (flag != "--metrics-port") {
      words.push_back("--metrics-port");
      words.push_back("0");
    }
    auto args = Parse(words);
    ASSERT_TRUE(args.ok()) << args.status();
    auto flags = MetricsFlagsFromArgs(*args, "m");
    ASSERT_FALSE(flags.ok()) << flag << " " << value;
    EXPECT_EQ(flags.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(flags.status().message()).find(flag.substr(2)),
              std::string::npos)
        << flags.status();
  }
}

}  // namespace
}  // namespace pdserve::metrics
