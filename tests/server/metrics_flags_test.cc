// The shared /metrics flags of `pdserve engine|scheduler|frontend`: their
// rows in the flag tables (config/process_flags.cc) and their mapping onto
// ProcessMetricsFlags.
#include "common/metrics/metrics_flags.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pdserve::metrics {
namespace {

template <typename O>
absl::StatusOr<config::Command<O>> Parse(const config::FlagTable<O>& table,
                                         std::vector<std::string> words) {
  std::vector<char*> argv;
  std::string self = "test";
  argv.push_back(self.data());
  for (std::string& w : words) argv.push_back(w.data());
  config::Layers layers;  // no environment, no default file
  layers.default_config_paths.clear();
  return config::ParseCommand(table, static_cast<int>(argv.size()),
                              argv.data(), layers);
}

absl::StatusOr<config::Command<config::EngineProcessOptions>> ParseEngine(
    std::vector<std::string> words) {
  return Parse(config::EngineFlagTable(), std::move(words));
}

template <typename O>
bool Has(const config::FlagTable<O>& table, const char* name) {
  for (const auto& f : table.flags) {
    if (f.info.name == name) return true;
  }
  return false;
}

TEST(MetricsFlagsTest, EngineOnlyDeclaresPeakBandwidth) {
  EXPECT_TRUE(Has(config::EngineFlagTable(), "peak-memory-bandwidth"));
  EXPECT_FALSE(Has(config::SchedulerFlagTable(), "peak-memory-bandwidth"));
  EXPECT_FALSE(Has(config::FrontendFlagTable(), "peak-memory-bandwidth"));
  for (const char* name : {"metrics-port", "metrics-host", "vllm-metrics"}) {
    EXPECT_TRUE(Has(config::EngineFlagTable(), name));
    EXPECT_TRUE(Has(config::SchedulerFlagTable(), name));
    EXPECT_TRUE(Has(config::FrontendFlagTable(), name));
  }
  EXPECT_FALSE(Parse(config::FrontendFlagTable(),
                     {"--peak-memory-bandwidth", "1e9"})
                   .ok());
}

TEST(MetricsFlagsTest, NoPortMeansNoEndpoint) {
  auto args = ParseEngine({"--vllm-metrics"});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_FALSE(MetricsFlagsFromOptions(args->options.metrics,
                                       args->options.host, "m")
                   .has_value());
}

TEST(MetricsFlagsTest, MapsEveryFlag) {
  auto args = ParseEngine({"--host", "0.0.0.0", "--metrics-port", "9402",
                           "--vllm-metrics", "--peak-memory-bandwidth",
                           "4.8e12"});
  ASSERT_TRUE(args.ok()) << args.status();
  auto flags = MetricsFlagsFromOptions(args->options.metrics,
                                       args->options.host, "smol",
                                       /*probe_threads=*/6);
  ASSERT_TRUE(flags.has_value());
  const ProcessMetricsFlags& f = *flags;
  EXPECT_EQ(f.host, "0.0.0.0");  // --metrics-host defaults to --host
  EXPECT_EQ(f.port, 9402);
  EXPECT_TRUE(f.vllm_compat);
  EXPECT_EQ(f.model_name, "smol");
  EXPECT_DOUBLE_EQ(f.peak_memory_bandwidth, 4.8e12);
  EXPECT_EQ(f.probe_threads, 6);
}

TEST(MetricsFlagsTest, DefaultsAndMetricsHost) {
  auto args = ParseEngine({"--host", "0.0.0.0", "--metrics-host",
                           "127.0.0.1", "--metrics-port", "0"});
  ASSERT_TRUE(args.ok()) << args.status();
  auto flags = MetricsFlagsFromOptions(args->options.metrics,
                                       args->options.host, "",
                                       /*probe_threads=*/0);
  ASSERT_TRUE(flags.has_value());
  EXPECT_EQ(flags->host, "127.0.0.1");
  EXPECT_EQ(flags->port, 0);
  EXPECT_FALSE(flags->vllm_compat);
  EXPECT_EQ(flags->model_name, "pdserve");
  EXPECT_EQ(flags->peak_memory_bandwidth, 0.0);  // 0 = probe at start
  EXPECT_EQ(flags->probe_threads, 1);
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
    auto args = ParseEngine(words);
    ASSERT_FALSE(args.ok()) << flag << " " << value;
    EXPECT_EQ(args.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(args.status().message()).find(flag.substr(2)),
              std::string::npos)
        << args.status();
  }
}

}  // namespace
}  // namespace pdserve::metrics
