#include "server/frontend/cluster_simulator.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve::frontend {
namespace {

using scheduler::TraceRequest;
using ::testing::HasSubstr;

ClusterConfig Base(int cells, int prefill_cells = 0) {
  ClusterConfig c;
  c.cells = cells;
  c.prefill_cells = prefill_cells;
  c.pool = {16, 8192, 4096, /*prefix_cache=*/true};
  c.cost = {5.0, 0.5, 1.0};
  c.itl_slowdown = 1.5;
  return c;
}

// `streams` short decode streams at t=0 and a long prompt every `gap_s`.
std::vector<TraceRequest> Mixed(int streams, int longs, double gap_s) {
  std::vector<TraceRequest> t;
  for (int i = 0; i < streams; ++i) t.push_back({0, 16, 128});
  for (int k = 0; k < longs; ++k) t.push_back({0.05 + k * gap_s, 2048, 4});
  return t;
}

TEST(ClusterSimulatorTest, OneCellWithAGivenCostEqualsTheSingleCellSimulator) {
  ClusterConfig c = Base(1);
  c.online_fit = false;
  c.pool.prefix_cache = false;
  const std::vector<TraceRequest> trace = Mixed(8, 3, 0.4);
  const ClusterResult cluster = SimulateCluster(trace, c);
  const scheduler::SimulationResult one =
      scheduler::Simulate(trace, c.policy, c.pool, c.cost, c.itl_slowdown,
                          c.itl_floor_ms);
  EXPECT_EQ(cluster.completed, one.completed);
  EXPECT_EQ(cluster.ttft_ms.count, one.ttft_ms.count);
  EXPECT_DOUBLE_EQ(cluster.ttft_ms.p99, one.ttft_ms.p99);
  EXPECT_DOUBLE_EQ(cluster.itl_ms.p50, one.itl_ms.p50);
  EXPECT_DOUBLE_EQ(cluster.itl_ms.p99, one.itl_ms.p99);
  EXPECT_DOUBLE_EQ(cluster.duration_s, one.duration_s);
  ASSERT_EQ(cluster.cells.size(), 1u);
  EXPECT_EQ(cluster.cells[0].steps, one.steps);
}

TEST(ClusterSimulatorTest, SharedPrefixLandsOnOneCellAndHitsItsCache) {
  // 32 requests sharing a 1,536-token system prompt, 0.2 s apart.
  std::vector<TraceRequest> trace;
  for (int i = 0; i < 32; ++i) {
    trace.push_back({i * 0.2, 1536 + 32, 16, 0, /*group=*/1, 1536});
  }
  const ClusterResult routed = SimulateCluster(trace, Base(4));
  int cells_used = 0;
  for (const SimCellStats& s : routed.cells) cells_used += s.routed > 0;
  EXPECT_EQ(cells_used, 1);
  EXPECT_GE(routed.prefix_hit_rate, 0.9);
  ClusterConfig rr = Base(4);
  rr.routing = SimRouting::kRoundRobin;
  const ClusterResult spread = SimulateCluster(trace, rr);
  for (const SimCellStats& s : spread.cells) EXPECT_EQ(s.routed, 8);
  EXPECT_LT(spread.prefix_hit_rate, routed.prefix_hit_rate);
  EXPECT_EQ(routed.completed, 32);
}

TEST(ClusterSimulatorTest, GivenPromptsAndCellNamesDriveTheRouter) {
  // Four identical prompts given explicitly: one routing key, one cell;
  // which cell follows the names the rendezvous hash sees.
  std::vector<TraceRequest> trace(4, TraceRequest{0, 32, 2});
  for (int i = 0; i < 4; ++i) trace[i].arrival_s = i * 0.5;
  const std::vector<std::vector<int32_t>> prompts(4, std::vector<int32_t>(32, 7));
  ClusterConfig c = Base(3);
  std::vector<int> chosen;
  for (const char* prefix : {"a", "b", "c", "d"}) {
    c.cell_ids = {absl::StrCat(prefix, "0"), absl::StrCat(prefix, "1"),
                  absl::StrCat(prefix, "2")};
    const ClusterResult r = SimulateCluster(trace, c, prompts);
    int used = -1, cells = 0;
    for (int i = 0; i < 3; ++i) {
      if (r.cells[i].routed > 0) used = i, ++cells;
    }
    EXPECT_EQ(cells, 1);
    EXPECT_EQ(r.cells[used].routed, 4);
    chosen.push_back(used);
  }
  // The names matter: not every naming picks the same index.
  EXPECT_NE(std::count(chosen.begin(), chosen.end(), chosen[0]), 4);
}

TEST(ClusterSimulatorTest, PrefillDecodeSplitShieldsDecodeStreams) {
  const std::vector<TraceRequest> trace = Mixed(16, 6, 0.5);
  const ClusterResult one = SimulateCluster(trace, Base(1));
  const ClusterResult pd = SimulateCluster(trace, Base(2, 1));
  EXPECT_EQ(one.completed, 22);
  EXPECT_EQ(pd.completed, 22);
  EXPECT_EQ(pd.handoffs, 6);
  EXPECT_EQ(one.handoffs, 0);
  // Every long prompt went to the prefill cell, every stream to the other.
  EXPECT_TRUE(pd.cells[0].prefill_role);
  EXPECT_EQ(pd.cells[0].routed, 6);
  EXPECT_EQ(pd.cells[1].routed, 16 + 6);
  EXPECT_LT(pd.itl_ms.p99, one.itl_ms.p99);
  // A decode cell's steps carry at most the one token after each hand-off.
  EXPECT_LE(pd.itl_ms.p99, Base(1).cost.StepMs(6, 22) + 1e-9);
}

TEST(ClusterSimulatorTest, HandoffTimeDelaysTheSecondToken) {
  std::vector<TraceRequest> trace = {{0, 1024, 2}};
  ClusterConfig c = Base(2, 1);
  c.handoff_fixed_ms = 40;
  c.handoff_ms_per_token = 0;
  const ClusterResult r = SimulateCluster(trace, c);
  ASSERT_EQ(r.itl_ms.count, 1);
  // Hand-off, then a 1-token prefill step on the decode cell.
  EXPECT_DOUBLE_EQ(r.itl_ms.p50, 40 + c.cost.StepMs(1, 0));
}

TEST(ClusterSimulatorTest, RecordsTokenTimesInTraceOrder) {
  // Given out of arrival order: the result follows the trace's order.
  std::vector<TraceRequest> trace = {{0.5, 8, 3}, {0, 8, 2}};
  ClusterConfig c = Base(1);
  c.record_token_times = true;
  const ClusterResult r = SimulateCluster(trace, c);
  ASSERT_EQ(r.token_ms.size(), 2u);
  EXPECT_EQ(r.token_ms[0].size(), 3u);
  EXPECT_EQ(r.token_ms[1].size(), 2u);
  EXPECT_GT(r.token_ms[0][0], 500);
  EXPECT_LT(r.token_ms[1][0], 500);
  EXPECT_TRUE(SimulateCluster(trace, Base(1)).token_ms.empty());
}

TEST(ClusterSimulatorTest, StepTimeRatiosAddTheMeasuredJitter) {
  const std::vector<TraceRequest> trace = Mixed(8, 0, 1);
  ClusterConfig c = Base(1);
  const ClusterResult steady = SimulateCluster(trace, c);
  EXPECT_DOUBLE_EQ(steady.itl_ms.p99, steady.itl_ms.p50);
  // Measured steps: 9 in 10 as the model says, 1 in 10 twice as long.
  std::vector<scheduler::StepSample> measured;
  for (int i = 0; i < 10; ++i) {
    const double ms = c.cost.StepMs(0, 8);
    measured.push_back({0, 8, i == 0 ? 2 * ms : ms});
  }
  // A prefill step 3x slower than modelled: only prefill steps draw it.
  measured.push_back({64, 0, 3 * c.cost.StepMs(64, 0)});
  c.step_time_ratios = scheduler::StepTimeRatios(measured, c.cost);
  ASSERT_EQ(c.step_time_ratios.decode_only.size(), 10u);
  ASSERT_EQ(c.step_time_ratios.prefill_only.size(), 1u);
  EXPECT_TRUE(c.step_time_ratios.mixed.empty());
  const ClusterResult jittery = SimulateCluster(trace, c);
  EXPECT_DOUBLE_EQ(jittery.itl_ms.p50, steady.itl_ms.p50);
  EXPECT_NEAR(jittery.itl_ms.p99, 2 * steady.itl_ms.p50, 1e-9);
  // Seeded: the same run twice gives the same figures.
  EXPECT_DOUBLE_EQ(SimulateCluster(trace, c).itl_ms.mean, jittery.itl_ms.mean);
}

// Each kind of step draws its own kind's ratios: a prefill-only chunk 2x
// slower than modelled must not stretch the mixed steps decoding streams
// see (the tail pd_bench's replay overestimated before the kinds split).
TEST(ClusterSimulatorTest, StepTimeRatiosKeepTheirKind) {
  const scheduler::StepCostModel cost{2.0, 0.05, 0.5, 0};
  std::vector<scheduler::StepSample> measured = {
      {0, 4, 1.5 * cost.StepMs(0, 4)},     // decode-only
      {32, 4, 1.1 * cost.StepMs(32, 4)},   // mixed
      {256, 0, 2.0 * cost.StepMs(256, 0)}, // prefill-only
      {0, 0, 0},                           // no time: skipped
  };
  const scheduler::StepTimeSpread spread =
      scheduler::StepTimeRatios(measured, cost);
  EXPECT_EQ(spread.For(0, 8), std::vector<double>{1.5});
  EXPECT_EQ(spread.For(16, 8), std::vector<double>{1.1});
  EXPECT_EQ(spread.For(512, 0), std::vector<double>{2.0});
  // A kind never measured borrows the nearest one.
  measured.erase(measured.begin() + 1);  // no mixed step
  const scheduler::StepTimeSpread no_mixed =
      scheduler::StepTimeRatios(measured, cost);
  EXPECT_EQ(no_mixed.For(16, 8), std::vector<double>{2.0});
  measured.erase(measured.begin() + 1);  // decode-only left
  EXPECT_EQ(scheduler::StepTimeRatios(measured, cost).For(512, 0),
            std::vector<double>{1.5});
  EXPECT_TRUE(scheduler::StepTimeSpread{}.For(1, 1).empty());
}

TEST(ClusterSimulatorTest, SloAttainmentAndGoodput) {
  const std::vector<TraceRequest> trace = Mixed(4, 2, 0.3);
  ClusterConfig c = Base(2);
  const ClusterResult free = SimulateCluster(trace, c);
  EXPECT_DOUBLE_EQ(free.slo_attainment, 1.0);
  EXPECT_NEAR(free.goodput_rps, free.completed / free.duration_s, 1e-9);
  c.slo.ttft_ms = 0.001;
  const ClusterResult strict = SimulateCluster(trace, c);
  EXPECT_DOUBLE_EQ(strict.slo_attainment, 0.0);
  EXPECT_DOUBLE_EQ(strict.goodput_rps, 0.0);
}

TEST(ClusterSimulatorTest, SizingKeepsThePrefillShareAndLatencyFalls) {
  std::vector<TraceRequest> trace;
  for (int i = 0; i < 200; ++i) trace.push_back({i * 0.01, 600, 32});
  const std::vector<SizingRow> rows = SizeCluster(trace, Base(4, 2), 8);
  ASSERT_EQ(rows.size(), 4u);
  const int cells[] = {1, 2, 4, 8}, prefill[] = {0, 1, 2, 4};
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].cells, cells[i]);
    EXPECT_EQ(rows[i].prefill_cells, prefill[i]);
    EXPECT_EQ(rows[i].result.completed, 200);
  }
  EXPECT_GT(rows[0].result.ttft_ms.p99, 4 * rows[3].result.ttft_ms.p99);
  const std::vector<SizingRow> odd = SizeCluster(trace, Base(1), 6);
  ASSERT_EQ(odd.size(), 4u);  // 1, 2, 4, 6
  EXPECT_EQ(odd.back().cells, 6);
}

TEST(ClusterSimulatorTest, RejectsBadConfigs) {
  EXPECT_THAT(CheckClusterConfig(Base(0)).message(), HasSubstr("cells 0"));
  EXPECT_THAT(CheckClusterConfig(Base(2, 2)).message(),
              HasSubstr("prefill cells 2 must be less than cells 2"));
  ClusterConfig free = Base(1);
  free.cost = {0, 0, 0};
  EXPECT_THAT(CheckClusterConfig(free).message(), HasSubstr("costs nothing"));
  EXPECT_TRUE(CheckClusterConfig(Base(3, 1)).ok());
}

}  // namespace
}  // namespace pdserve::frontend
