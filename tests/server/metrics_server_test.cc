// MetricsServer end to end: bind port 0, record stats through the metric
// sets, fetch /metrics over HTTP, lint it with `promtool check metrics` and
// check the values (bandwidth = bytes / time, histogram counts, counters).
#include "common/metrics/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/metrics/engine_metrics.h"
#include "common/metrics/frontend_metrics.h"
#include "common/metrics/metric_names.h"
#include "common/metrics/process_metrics.h"
#include "common/metrics/scheduler_metrics.h"

namespace pdserve::metrics {
namespace {

using ::testing::HasSubstr;

// GET http://127.0.0.1:port/path; returns the body, or "" on any failure.
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string request =
      absl::StrCat("GET ", path,
                   " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  if (send(fd, request.data(), request.size(), 0) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return "";
  }
  std::string response;
  char buf[8192];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) {
    response.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (!absl::StartsWith(response, "HTTP/1.1 200") &&
      !absl::StartsWith(response, "HTTP/1.0 200")) {
    return "";
  }
  return body == std::string::npos ? "" : response.substr(body + 4);
}

// Sample lines "name{labels} value" -> value.
std::map<std::string, double> ParseSamples(const std::string& text) {
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    double v = 0;
    if (space == absl::string_view::npos ||
        !absl::SimpleAtod(line.substr(space + 1), &v)) {
      continue;
    }
    out[std::string(line.substr(0, space))] = v;
  }
  return out;
}

// Runs `promtool check metrics` on `text`; returns its exit status and
// fills `output`. -1 when promtool is not installed.
int PromtoolCheckMetrics(const std::string& text, std::string* output) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) return -1;
  const std::string base =
      absl::StrCat(::testing::TempDir(), "/pdserve_metrics_", getpid());
  const std::string in = base + "_page.txt";
  const std::string out = base + "_promtool.txt";
  std::ofstream(in) << text;
  const int rc = std::system(
      absl::StrCat("promtool check metrics < ", in, " > ", out, " 2>&1")
          .c_str());
  std::ifstream f(out);
  output->assign(std::istreambuf_iterator<char>(f), {});
  std::remove(in.c_str());
  std::remove(out.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

StepStats Step(StepKind kind, double seconds, int64_t prefill, int64_t decode,
               int64_t batch, int64_t weights, int64_t kv_read,
               int64_t kv_written, double flops) {
  StepStats s;
  s.kind = kind;
  s.duration_seconds = seconds;
  s.prefill_tokens = prefill;
  s.decode_tokens = decode;
  s.batch_size = batch;
  s.weight_bytes_read = weights;
  s.kv_bytes_read = kv_read;
  s.kv_bytes_written = kv_written;
  s.flops = flops;
  return s;
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void StartServer(const std::string& process) {
    absl::StatusOr<std::unique_ptr<MetricsServer>> s = MetricsServer::Start(
        {.host = "127.0.0.1", .port = 0, .process = process});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    ASSERT_GT(server_->port(), 0);
  }
  std::string Fetch() { return HttpGet(server_->port(), "/metrics"); }
  std::unique_ptr<MetricsServer> server_;
};

TEST_F(MetricsServerTest, EngineBandwidthIsBytesOverTime) {
  ASSERT_NO_FATAL_FAILURE(StartServer("engine"));
  EngineMetricsOptions options;
  options.peak_bandwidth_bytes_per_second = 20e9;
  auto engine = EngineMetrics::Create(server_->registry(), options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  // A prefill step: 512 tokens, 0.25 s, 1e8 weight bytes, 6e6 KV written.
  ASSERT_TRUE((*engine)
                  ->RecordStep(Step(StepKind::kPrefill, 0.25, 512, 0, 1,
                                    100'000'000, 0, 6'000'000, 6e10))
                  .ok());
  // A decode step of 8 sequences: 0.02 s, 1e8 weights, 4e6 KV read, 1e5
  // written.
  ASSERT_TRUE((*engine)
                  ->RecordStep(Step(StepKind::kDecode, 0.02, 0, 8, 8,
                                    100'000'000, 4'000'000, 100'000, 1e9))
                  .ok());
  server_->SetReady(true);

  const std::string page = Fetch();
  ASSERT_FALSE(page.empty());
  const auto m = ParseSamples(page);
  const double decode_bw = (100'000'000.0 + 4'000'000.0 + 100'000.0) / 0.02;
  EXPECT_DOUBLE_EQ(m.at("pdserve_engine_memory_bandwidth_bytes_per_second"),
                   decode_bw);
  EXPECT_DOUBLE_EQ(m.at("pdserve_engine_memory_bandwidth_utilization_ratio"),
                   decode_bw / 20e9);
  EXPECT_DOUBLE_EQ(m.at("pdserve_engine_achieved_flop_per_second"), 1e9 / 0.02);
  EXPECT_DOUBLE_EQ(
      m.at("pdserve_engine_peak_memory_bandwidth_bytes_per_second{source="
           "\"configured\"}"),
      20e9);
  EXPECT_EQ(m.at("pdserve_engine_tokens_total{kind=\"prefill\"}"), 512);
  EXPECT_EQ(m.at("pdserve_engine_tokens_total{kind=\"decode\"}"), 8);
  EXPECT_EQ(m.at("pdserve_engine_memory_bytes_total{kind=\"weights_read\"}"),
            200'000'000);
  EXPECT_EQ(m.at("pdserve_engine_memory_bytes_total{kind=\"kv_read\"}"),
            4'000'000);
  EXPECT_EQ(m.at("pdserve_engine_memory_bytes_total{kind=\"kv_written\"}"),
            6'100'000);
  EXPECT_EQ(
      m.at("pdserve_engine_step_duration_seconds_count{kind=\"prefill\"}"), 1);
  EXPECT_DOUBLE_EQ(
      m.at("pdserve_engine_step_duration_seconds_sum{kind=\"decode\"}"), 0.02);
  EXPECT_EQ(m.at("pdserve_engine_step_duration_seconds_count{kind=\"mixed\"}"),
            0);
  // The bandwidth histogram holds each step's own rate.
  EXPECT_DOUBLE_EQ(
      m.at("pdserve_engine_step_memory_bandwidth_bytes_per_second_sum{kind="
           "\"prefill\"}"),
      106'000'000.0 / 0.25);
  EXPECT_EQ(m.at("pdserve_engine_batch_size_bucket{kind=\"decode\",le=\"8\"}"),
            1);
  EXPECT_EQ(m.at("pdserve_engine_batch_size_bucket{kind=\"decode\",le=\"4\"}"),
            0);
  EXPECT_EQ(m.at("pdserve_ready{process=\"engine\"}"), 1);
  EXPECT_THAT(page, HasSubstr("pdserve_build_info{"));

  std::string lint;
  const int rc = PromtoolCheckMetrics(page, &lint);
  if (rc == -1) GTEST_SKIP() << "promtool not installed (scripts/setup.sh)";
  EXPECT_EQ(rc, 0) << lint;
}

TEST_F(MetricsServerTest, PoolPreemptionsAreCountedFromTotals) {
  ASSERT_NO_FATAL_FAILURE(StartServer("engine"));
  auto engine = EngineMetrics::Create(server_->registry(), {});
  ASSERT_TRUE(engine.ok());
  PoolStats p;
  p.capacity_tokens = 4096;
  p.used_tokens = 1000;
  p.page_size_tokens = 16;
  p.total_pages = 256;
  p.used_pages = 64;
  p.capacity_bytes = 256 * 16 * 9216;
  p.active_sequences = 3;
  p.max_sequences = 64;
  p.preemptions_total = 2;
  ASSERT_TRUE((*engine)->RecordPool(p).ok());
  p.preemptions_total = 5;
  ASSERT_TRUE((*engine)->RecordPool(p).ok());
  p.preemptions_total = 1;  // the pool restarted: counts from zero again
  ASSERT_TRUE((*engine)->RecordPool(p).ok());
  PoolStats bad = p;
  bad.used_pages = 300;
  EXPECT_EQ((*engine)->RecordPool(bad).code(),
            absl::StatusCode::kInvalidArgument);
  const auto m = ParseSamples(Fetch());
  EXPECT_EQ(m.at("pdserve_engine_preemptions_total"), 6);
  EXPECT_EQ(m.at("pdserve_engine_kv_free_tokens"), 3096);
  EXPECT_EQ(m.at("pdserve_engine_kv_free_pages"), 192);
  EXPECT_DOUBLE_EQ(m.at("pdserve_engine_kv_usage_ratio"), 0.25);
  EXPECT_EQ(m.at("pdserve_engine_active_sequences"), 3);
  EXPECT_EQ(m.count("vllm:kv_cache_usage_perc{model_name=\"pdserve\"}"), 0u);
}

TEST_F(MetricsServerTest, InvalidStepIsNotRecorded) {
  ASSERT_NO_FATAL_FAILURE(StartServer("engine"));
  auto engine = EngineMetrics::Create(server_->registry(), {});
  ASSERT_TRUE(engine.ok());
  const absl::Status st =
      (*engine)->RecordStep(Step(StepKind::kDecode, 0.0, 0, 1, 1, 10, 0, 0, 0));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  const auto m = ParseSamples(Fetch());
  EXPECT_EQ(m.at("pdserve_engine_step_duration_seconds_count{kind=\"decode\"}"),
            0);
  EXPECT_EQ(m.at("pdserve_engine_tokens_total{kind=\"decode\"}"), 0);
}

TEST_F(MetricsServerTest, ProbedPeakReplacesConfigured) {
  ASSERT_NO_FATAL_FAILURE(StartServer("engine"));
  auto engine = EngineMetrics::Create(server_->registry(), {});
  ASSERT_TRUE(engine.ok());
  EXPECT_FALSE((*engine)->SetPeakBandwidth(-1.0, "probe").ok());
  EXPECT_FALSE((*engine)->SetPeakBandwidth(1e9, "guess").ok());
  ASSERT_TRUE((*engine)->SetPeakBandwidth(1e10, "probe").ok());
  EXPECT_EQ((*engine)->peak_bandwidth_bytes_per_second(), 1e10);
  ASSERT_TRUE((*engine)
                  ->RecordStep(Step(StepKind::kDecode, 0.5, 0, 1, 1,
                                    1'000'000'000, 0, 0, 0))
                  .ok());
  const auto m = ParseSamples(Fetch());
  EXPECT_EQ(m.count("pdserve_engine_peak_memory_bandwidth_bytes_per_second{"
                    "source=\"configured\"}"),
            0u);
  EXPECT_EQ(m.at("pdserve_engine_peak_memory_bandwidth_bytes_per_second{"
                 "source=\"probe\"}"),
            1e10);
  EXPECT_DOUBLE_EQ(m.at("pdserve_engine_memory_bandwidth_utilization_ratio"),
                   0.2);
}

// A device engine's peak comes from its device probe (source
// "device_probe"), not the host copy probe, and the utilisation ratio is
// computed against it; a configured peak wins; a failing probe fails start.
TEST(EngineMetricsStartTest, DevicePeakComesFromTheDeviceProbe) {
  ProcessMetricsFlags flags;
  int probes = 0;
  flags.device_probe = [&probes]() -> absl::StatusOr<double> {
    ++probes;
    return 4e12;
  };
  auto handle = StartEngineMetrics(flags);
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_EQ(probes, 1);
  EXPECT_EQ(handle->metrics->peak_bandwidth_bytes_per_second(), 4e12);
  // A decode step moving 6e10 bytes in 0.02 s: 3e12 B/s, 0.75 of the peak.
  ASSERT_TRUE(handle->metrics
                  ->RecordStep(Step(StepKind::kDecode, 0.02, 0, 1, 1,
                                    60'000'000'000, 0, 0, 0))
                  .ok());
  handle->server->SetReady(true);
  const auto m = ParseSamples(HttpGet(handle->server->port(), "/metrics"));
  EXPECT_EQ(m.at("pdserve_engine_peak_memory_bandwidth_bytes_per_second{"
                 "source=\"device_probe\"}"),
            4e12);
  EXPECT_EQ(m.count("pdserve_engine_peak_memory_bandwidth_bytes_per_second{"
                    "source=\"probe\"}"),
            0u);
  EXPECT_DOUBLE_EQ(m.at("pdserve_engine_memory_bandwidth_utilization_ratio"),
                   0.75);

  flags.peak_memory_bandwidth = 5e12;
  auto configured = StartEngineMetrics(flags);
  ASSERT_TRUE(configured.ok()) << configured.status();
  EXPECT_EQ(probes, 1);
  EXPECT_EQ(configured->metrics->peak_bandwidth_bytes_per_second(), 5e12);

  flags.peak_memory_bandwidth = 0;
  flags.device_probe = []() -> absl::StatusOr<double> {
    return absl::ResourceExhaustedError("cannot allocate 268435456 bytes");
  };
  auto failed = StartEngineMetrics(flags);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(failed.status().message(),
              HasSubstr("--peak-memory-bandwidth): cannot allocate 268435456"));
}

TEST_F(MetricsServerTest, SchedulerQueueAndEvents) {
  ASSERT_NO_FATAL_FAILURE(StartServer("scheduler"));
  auto sched = SchedulerMetrics::Create(
      server_->registry(), {.vllm_compat = true, .model_name = "smollm2"});
  ASSERT_TRUE(sched.ok());
  SchedulerStats s;
  s.waiting_requests = 5;
  s.running_requests = 7;
  s.admitted = 3;
  s.preempted = 1;
  s.cancelled = 2;
  s.finished = 4;
  s.planned_prefill_tokens = 480;
  s.planned_decode_tokens = 7;
  s.token_budget = 512;
  s.kv_total_pages = 200;
  s.kv_free_pages = 150;
  ASSERT_TRUE((*sched)->RecordIteration(s).ok());
  s.kv_free_pages = 201;  // refused naming both numbers, nothing recorded
  const absl::Status over = (*sched)->RecordIteration(s);
  EXPECT_EQ(over.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(over.message(), HasSubstr("kv_free_pages 201 exceeds "
                                        "kv_total_pages 200"));
  s.kv_free_pages = 50;
  s.admitted = 1;
  s.waiting_requests = 4;
  ASSERT_TRUE((*sched)->RecordIteration(s).ok());
  (*sched)->RecordRejection(RejectReason::kQueueFull);
  (*sched)->RecordRejection(RejectReason::kQueueFull);
  (*sched)->RecordRejection(RejectReason::kPromptTooLong);
  const auto m = ParseSamples(Fetch());
  EXPECT_EQ(m.at("pdserve_scheduler_requests_waiting"), 4);
  EXPECT_EQ(m.at("pdserve_scheduler_requests_running"), 7);
  EXPECT_EQ(m.at("vllm:num_requests_waiting{model_name=\"smollm2\"}"), 4);
  EXPECT_EQ(m.at("vllm:num_requests_running{model_name=\"smollm2\"}"), 7);
  // The ledger's share of pages in use: (200 - 50) / 200.
  EXPECT_EQ(m.at("vllm:kv_cache_usage_perc{model_name=\"smollm2\"}"), 0.75);
  EXPECT_EQ(m.at("pdserve_scheduler_admissions_total"), 4);
  EXPECT_EQ(m.at("pdserve_scheduler_cancellations_total"), 4);
  EXPECT_EQ(m.at("pdserve_scheduler_preemptions_total"), 2);
  EXPECT_EQ(m.at("pdserve_scheduler_iterations_total"), 2);
  EXPECT_EQ(m.at("pdserve_scheduler_planned_tokens_total{kind=\"prefill\"}"),
            960);
  EXPECT_EQ(m.at("pdserve_scheduler_token_budget_tokens"), 512);
  EXPECT_EQ(m.at("pdserve_scheduler_rejections_total{reason=\"queue_full\"}"),
            2);
  EXPECT_EQ(
      m.at("pdserve_scheduler_rejections_total{reason=\"prompt_too_long\"}"),
      1);
  EXPECT_EQ(m.at("pdserve_scheduler_rejections_total{reason=\"draining\"}"), 0);
}

TEST_F(MetricsServerTest, FrontendRequestsByCodeAndLatencies) {
  ASSERT_NO_FATAL_FAILURE(StartServer("frontend"));
  auto fe = FrontendMetrics::Create(server_->registry());
  ASSERT_TRUE(fe.ok());
  for (int i = 0; i < 3; ++i) {
    (*fe)->RecordRequestStart();
    RequestStats r;
    r.grpc_code = 0;
    r.ttft_seconds = 0.05 * (i + 1);
    r.e2e_seconds = 0.5;
    r.queue_seconds = 0.001;
    r.prefill_seconds = 0.04;
    r.decode_seconds = 0.45;
    r.prompt_tokens = 20;
    r.generated_tokens = 10;
    r.finish_reason = "length";
    ASSERT_TRUE((*fe)->RecordRequest(r).ok());
    for (int t = 0; t < 9; ++t) (*fe)->ObserveInterTokenLatency(0.0015);
  }
  (*fe)->RecordRequestStart();
  RequestStats rejected;
  rejected.grpc_code = 3;  // INVALID_ARGUMENT: no token, no TTFT
  rejected.e2e_seconds = 0.0002;
  rejected.finish_reason = "error";
  ASSERT_TRUE((*fe)->RecordRequest(rejected).ok());
  (*fe)->RecordRequestStart();
  RequestStats tokenize;
  tokenize.method = "Tokenize";
  tokenize.grpc_code = 0;
  ASSERT_TRUE((*fe)->RecordRequest(tokenize).ok());
  (*fe)->RecordRequestStart();  // still in flight
  (*fe)->RecordStreamWriteStall(0.2);
  (*fe)->ObserveTokenizer(TokenizerOp::kEncode, 0.0003);
  RequestStats bad;
  bad.prompt_tokens = -1;
  (*fe)->RecordRequestStart();
  EXPECT_EQ((*fe)->RecordRequest(bad).code(),
            absl::StatusCode::kInvalidArgument);

  const std::string page = Fetch();
  const auto m = ParseSamples(page);
  EXPECT_EQ(m.at("pdserve_frontend_requests_total{code=\"OK\",method="
                 "\"Generate\"}"),
            3);
  EXPECT_EQ(m.at("pdserve_frontend_requests_total{code=\"INVALID_ARGUMENT\","
                 "method=\"Generate\"}"),
            1);
  EXPECT_EQ(m.at("pdserve_frontend_requests_total{code=\"UNAVAILABLE\","
                 "method=\"Generate\"}"),
            0);
  EXPECT_EQ(m.at("pdserve_frontend_requests_total{code=\"OK\",method="
                 "\"Tokenize\"}"),
            1);
  EXPECT_EQ(m.at("pdserve_frontend_requests_in_flight"), 1);
  EXPECT_EQ(m.at("pdserve_frontend_time_to_first_token_seconds_count{api=\"grpc\"}"), 3);
  EXPECT_DOUBLE_EQ(m.at("pdserve_frontend_time_to_first_token_seconds_sum{api=\"grpc\"}"),
                   0.3);
  EXPECT_EQ(m.at("pdserve_frontend_time_to_first_token_seconds_bucket{api=\"grpc\","
                 "le=\"0.1\"}"),
            2);
  EXPECT_EQ(m.at("pdserve_frontend_request_duration_seconds_count{api=\"grpc\"}"), 4);
  EXPECT_EQ(m.at("pdserve_frontend_inter_token_latency_seconds_count{api=\"grpc\"}"), 27);
  EXPECT_EQ(
      m.at("pdserve_frontend_inter_token_latency_seconds_bucket{api=\"grpc\","
           "le=\"0.001\"}"),
      0);
  EXPECT_EQ(
      m.at("pdserve_frontend_inter_token_latency_seconds_bucket{api=\"grpc\","
           "le=\"0.002\"}"),
      27);
  EXPECT_EQ(m.at("pdserve_frontend_generation_tokens_total"), 30);
  EXPECT_EQ(m.at("pdserve_frontend_prompt_tokens_total"), 60);
  EXPECT_EQ(m.at("pdserve_frontend_finish_reasons_total{reason=\"length\"}"),
            3);
  EXPECT_EQ(m.at("pdserve_frontend_finish_reasons_total{reason=\"error\"}"), 1);
  EXPECT_EQ(m.at("pdserve_frontend_stream_write_stalls_total"), 1);
  EXPECT_EQ(m.at("pdserve_frontend_tokenizer_seconds_count{op=\"encode\"}"), 1);

  std::string lint;
  const int rc = PromtoolCheckMetrics(page, &lint);
  if (rc == -1) GTEST_SKIP() << "promtool not installed (scripts/setup.sh)";
  EXPECT_EQ(rc, 0) << lint;
}

// Every metric of the table is exported with its TYPE and HELP, and the only
// lint findings on a page with the vLLM names are about their ':'.
TEST_F(MetricsServerTest, EveryTableMetricIsExportedWithHelp) {
  ASSERT_NO_FATAL_FAILURE(StartServer("serve"));
  auto engine =
      EngineMetrics::Create(server_->registry(), {.vllm_compat = true});
  auto sched =
      SchedulerMetrics::Create(server_->registry(), {.vllm_compat = true});
  auto fe = FrontendMetrics::Create(server_->registry());
  ASSERT_TRUE(engine.ok() && sched.ok() && fe.ok());
  const std::string page = Fetch();
  for (const MetricSpec* spec : kAllMetrics) {
    const char* type = spec->type == MetricType::kCounter ? "counter"
                       : spec->type == MetricType::kGauge ? "gauge"
                                                          : "histogram";
    EXPECT_THAT(page,
                HasSubstr(absl::StrCat("# TYPE ", spec->name, " ", type)));
    EXPECT_THAT(
        page, HasSubstr(absl::StrCat("# HELP ", spec->name, " ", spec->help)));
  }
  std::string lint;
  const int rc = PromtoolCheckMetrics(page, &lint);
  if (rc == -1) GTEST_SKIP() << "promtool not installed (scripts/setup.sh)";
  for (absl::string_view line : absl::StrSplit(lint, '\n', absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(line, "vllm:")) << line;
  }
}

TEST(MetricsServerStartTest, TwoServersAndABusyPort) {
  auto a = MetricsServer::Start({.port = 0, .process = "frontend"});
  auto b = MetricsServer::Start({.port = 0, .process = "scheduler"});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->port(), (*b)->port());
  EXPECT_EQ((*a)->url(),
            absl::StrCat("http://127.0.0.1:", (*a)->port(), "/metrics"));
  EXPECT_THAT(HttpGet((*b)->port(), "/metrics"),
              HasSubstr("pdserve_ready{process=\"scheduler\"} 0"));
  auto busy = MetricsServer::Start({.port = (*a)->port(), .process = "engine"});
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(busy.status().message(),
              HasSubstr(absl::StrCat("127.0.0.1:", (*a)->port())));
}

TEST(ProcessMetricsTest, EngineProbesPeakWhenNoneConfigured) {
  auto probed = StartEngineMetrics({.port = 0,
                                    .vllm_compat = true,
                                    .model_name = "m",
                                    .probe_threads = 1,
                                    .probe_buffer_bytes = 16 << 20});
  ASSERT_TRUE(probed.ok()) << probed.status();
  EXPECT_GT(probed->metrics->peak_bandwidth_bytes_per_second(), 1e8);
  const auto m = ParseSamples(HttpGet(probed->server->port(), "/metrics"));
  EXPECT_GT(m.at("pdserve_engine_peak_memory_bandwidth_bytes_per_second{"
                 "source=\"probe\"}"),
            1e8);
  EXPECT_EQ(m.at("vllm:kv_cache_usage_perc{model_name=\"m\"}"), 0);

  auto configured =
      StartEngineMetrics({.port = 0, .peak_memory_bandwidth = 4.8e12});
  ASSERT_TRUE(configured.ok()) << configured.status();
  EXPECT_EQ(configured->metrics->peak_bandwidth_bytes_per_second(), 4.8e12);
  auto sched = StartSchedulerMetrics({.port = 0});
  auto fe = StartFrontendMetrics({.port = 0});
  ASSERT_TRUE(sched.ok() && fe.ok());
  EXPECT_THAT(HttpGet(fe->server->port(), "/metrics"),
              HasSubstr("pdserve_ready{process=\"frontend\"} 0"));
  auto busy = StartSchedulerMetrics({.port = fe->server->port()});
  EXPECT_EQ(busy.status().code(), absl::StatusCode::kUnavailable);
}

TEST(MetricsServerStartTest, RejectsBadOptions) {
  EXPECT_THAT(MetricsServer::Start({.port = 70000, .process = "engine"})
                  .status()
                  .message(),
              HasSubstr("70000"));
  EXPECT_EQ(MetricsServer::Start({.port = 0, .process = ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(JoinHostPort("::1", 9400), "[::1]:9400");
  EXPECT_EQ(JoinHostPort("0.0.0.0", 9400), "0.0.0.0:9400");
}

}  // namespace
}  // namespace pdserve::metrics
