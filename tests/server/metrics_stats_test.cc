// Pure parts of common/metrics: stats validation, derived figures, buckets,
// the metric-name table.
#include <cmath>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/metrics/bandwidth_probe.h"
#include "common/metrics/buckets.h"
#include "common/metrics/metric_names.h"
#include "common/metrics/stats.h"

namespace pdserve::metrics {
namespace {

using ::testing::HasSubstr;

StepStats DecodeStep() {
  StepStats s;
  s.kind = StepKind::kDecode;
  s.duration_seconds = 0.02;
  s.decode_tokens = 4;
  s.batch_size = 4;
  s.weight_bytes_read = 100'000'000;
  s.kv_bytes_read = 8'000'000;
  s.kv_bytes_written = 2'000'000;
  s.flops = 1e9;
  return s;
}

TEST(StepStatsTest, BandwidthIsBytesMovedOverTime) {
  const StepStats s = DecodeStep();
  EXPECT_EQ(StepBytesMoved(s), 110'000'000);
  EXPECT_DOUBLE_EQ(AchievedBandwidth(s), 110'000'000 / 0.02);
  EXPECT_DOUBLE_EQ(AchievedFlopsPerSecond(s), 1e9 / 0.02);
  StepStats zero = s;
  zero.duration_seconds = 0.0;
  EXPECT_EQ(AchievedBandwidth(zero), 0.0);
  EXPECT_EQ(AchievedFlopsPerSecond(zero), 0.0);
}

TEST(StepStatsTest, StateBytesCount) {
  StepStats s = DecodeStep();
  s.state_bytes = 5'000'000;
  EXPECT_EQ(StepBytesMoved(s), 115'000'000);
}

TEST(StepStatsTest, ClassifyStep) {
  EXPECT_EQ(ClassifyStep(10, 0), StepKind::kPrefill);
  EXPECT_EQ(ClassifyStep(0, 3), StepKind::kDecode);
  EXPECT_EQ(ClassifyStep(10, 3), StepKind::kMixed);
  EXPECT_EQ(StepKindName(StepKind::kMixed), "mixed");
}

TEST(StepStatsTest, ValidationNamesTheNumbers) {
  EXPECT_TRUE(ValidateStepStats(DecodeStep()).ok());
  StepStats s = DecodeStep();
  s.duration_seconds = -0.5;
  EXPECT_THAT(ValidateStepStats(s).message(), HasSubstr("-0.5"));
  s = DecodeStep();
  s.duration_seconds = std::nan("");
  EXPECT_FALSE(ValidateStepStats(s).ok());
  s = DecodeStep();
  s.kv_bytes_read = -7;
  EXPECT_THAT(ValidateStepStats(s).message(), HasSubstr("kv_bytes_read is -7"));
  s = DecodeStep();
  s.batch_size = 0;
  EXPECT_THAT(ValidateStepStats(s).message(), HasSubstr("batch_size is 0"));
  s = DecodeStep();
  s.prefill_tokens = 12;  // now a mixed step labelled decode
  const absl::Status st = ValidateStepStats(s);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("12 prefill"));
  EXPECT_THAT(st.message(), HasSubstr("mixed"));
  s = DecodeStep();
  s.decode_tokens = 0;
  EXPECT_THAT(ValidateStepStats(s).message(), HasSubstr("0 prefill + 0"));
}

TEST(PoolStatsTest, UsageAndValidation) {
  PoolStats p;
  p.capacity_tokens = 1024;
  p.used_tokens = 300;
  p.page_size_tokens = 16;
  p.total_pages = 64;
  p.used_pages = 20;
  EXPECT_TRUE(ValidatePoolStats(p).ok());
  EXPECT_DOUBLE_EQ(PoolUsageFraction(p), 20.0 / 64.0);
  PoolStats slots = p;
  slots.total_pages = 0;
  slots.used_pages = 0;
  EXPECT_DOUBLE_EQ(PoolUsageFraction(slots), 300.0 / 1024.0);
  EXPECT_EQ(PoolUsageFraction(PoolStats{}), 0.0);

  PoolStats bad = p;
  bad.used_pages = 65;
  EXPECT_THAT(ValidatePoolStats(bad).message(),
              HasSubstr("used_pages 65 exceeds total_pages 64"));
  bad = p;
  bad.used_tokens = 2000;
  EXPECT_THAT(ValidatePoolStats(bad).message(),
              HasSubstr("used_tokens 2000 exceeds capacity_tokens 1024"));
  bad = p;
  bad.linear_state_slots_total = 4;
  bad.linear_state_slots_used = 5;
  EXPECT_THAT(ValidatePoolStats(bad).message(), HasSubstr("5 exceeds"));
  bad = p;
  bad.preemptions_total = -1;
  EXPECT_THAT(ValidatePoolStats(bad).message(),
              HasSubstr("preemptions_total is -1"));
}

TEST(SchedulerStatsTest, Validation) {
  SchedulerStats s;
  s.planned_prefill_tokens = 500;
  s.planned_decode_tokens = 20;
  s.token_budget = 512;
  EXPECT_THAT(ValidateSchedulerStats(s).message(),
              HasSubstr("520 tokens (500 prefill + 20 decode), over the token "
                        "budget 512"));
  s.token_budget = 0;  // not reported
  EXPECT_TRUE(ValidateSchedulerStats(s).ok());
  s.waiting_requests = -2;
  EXPECT_FALSE(ValidateSchedulerStats(s).ok());
}

TEST(NamesTest, GrpcCodesAndReasons) {
  EXPECT_EQ(GrpcCodeName(0), "OK");
  EXPECT_EQ(GrpcCodeName(3), "INVALID_ARGUMENT");
  EXPECT_EQ(GrpcCodeName(8), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(GrpcCodeName(14), "UNAVAILABLE");
  EXPECT_EQ(GrpcCodeName(16), "UNAUTHENTICATED");
  EXPECT_EQ(GrpcCodeName(17), "UNKNOWN");
  EXPECT_EQ(GrpcCodeName(-1), "UNKNOWN");
  EXPECT_EQ(RejectReasonName(RejectReason::kQueueFull), "queue_full");
  EXPECT_EQ(RejectReasonName(RejectReason::kDraining), "draining");
}

void ExpectIncreasing(const std::vector<double>& b) {
  ASSERT_FALSE(b.empty());
  for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]) << i;
}

TEST(BucketsTest, ShapesAndRanges) {
  for (const auto& b :
       {RequestLatencyBuckets(), TokenLatencyBuckets(), StepDurationBuckets(),
        TokenizerBuckets(), BatchSizeBuckets(), BandwidthBuckets()}) {
    ExpectIncreasing(b);
  }
  EXPECT_DOUBLE_EQ(TokenLatencyBuckets().front(), 0.001);  // from 1 ms
  EXPECT_DOUBLE_EQ(TokenLatencyBuckets().back(), 10.0);
  EXPECT_DOUBLE_EQ(RequestLatencyBuckets().front(), 0.001);
  EXPECT_DOUBLE_EQ(RequestLatencyBuckets().back(), 120.0);
  EXPECT_DOUBLE_EQ(BatchSizeBuckets().back(), 1024.0);
  EXPECT_GT(BandwidthBuckets().back(), 4.8e12);  // H200 HBM3e peak fits
  EXPECT_EQ(ExponentialBuckets(1.0, 2.0, 3), (std::vector<double>{1, 2, 4}));
  EXPECT_TRUE(ExponentialBuckets(0.0, 2.0, 3).empty());
  EXPECT_TRUE(ExponentialBuckets(1.0, 1.0, 3).empty());
}

TEST(MetricNamesTest, PrefixedUniqueWithUnitsAndHelp) {
  std::set<std::string> seen;
  for (const MetricSpec* spec : kAllMetrics) {
    const std::string name = spec->name;
    EXPECT_TRUE(seen.insert(name).second) << "duplicate " << name;
    EXPECT_TRUE(absl::StartsWith(name, "pdserve_") ||
                absl::StartsWith(name, "vllm:"))
        << name;
    EXPECT_GT(std::string(spec->help).size(), 10u) << name;
    const bool is_total = absl::EndsWith(name, "_total");
    EXPECT_EQ(is_total, spec->type == MetricType::kCounter) << name;
    if (spec->type == MetricType::kHistogram) {
      EXPECT_TRUE(absl::EndsWith(name, "_seconds") ||
                  absl::EndsWith(name, "_per_second") ||
                  absl::EndsWith(name, "_size"))
          << name;
    }
  }
}

TEST(CopyProbeTest, BufferSizing) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  EXPECT_EQ(CopyProbeBufferBytes(0), 64 * kMiB);
  EXPECT_EQ(CopyProbeBufferBytes(16 * kMiB), 64 * kMiB);
  EXPECT_EQ(CopyProbeBufferBytes(96 * kMiB), 192 * kMiB);
  EXPECT_EQ(CopyProbeBufferBytes(4096 * kMiB), 256 * kMiB);
  // The default buffer is at least twice this machine's LLC, up to the cap.
  const int64_t llc = LastLevelCacheBytes();
  EXPECT_GE(CopyProbeBufferBytes(llc), std::min<int64_t>(2 * llc, 256 * kMiB));
}

TEST(CopyProbeTest, MeasuresAPositiveRate) {
  CopyProbeOptions o;
  o.buffer_bytes = 16 << 20;
  o.reps = 3;
  o.threads = 2;
  absl::StatusOr<CopyProbeResult> r = MeasureHostCopyBandwidth(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->bytes_per_second, 1e8);  // any machine copies > 100 MB/s
  EXPECT_GT(r->best_seconds, 0.0);
  EXPECT_DOUBLE_EQ(r->bytes_per_second,
                   2.0 * static_cast<double>(o.buffer_bytes) / r->best_seconds);
  EXPECT_EQ(r->reps, 3);
  EXPECT_EQ(r->threads, 2);
}

TEST(CopyProbeTest, RejectsBadOptions) {
  CopyProbeOptions o;
  o.reps = 0;
  EXPECT_THAT(MeasureHostCopyBandwidth(o).status().message(),
              HasSubstr("reps 0"));
  o.reps = 1;
  o.buffer_bytes = 1000;
  EXPECT_THAT(MeasureHostCopyBandwidth(o).status().message(),
              HasSubstr("1000 bytes"));
}

}  // namespace
}  // namespace pdserve::metrics
