// The front end's cell routing (server/frontend/cell_router.h): prefix keys,
// rendezvous affinity that is stable and spreads distinct prefixes, bounded
// load (spill), least-loaded choice with ties in turn, cells not ready
// skipped, and the router's argument checks.
#include "server/frontend/cell_router.h"

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve::frontend {
namespace {

using ::testing::HasSubstr;

std::vector<int32_t> Tokens(int n, int32_t first) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

const std::vector<std::string> kIds = {"10.0.0.1:50052", "10.0.0.2:50052",
                                       "10.0.0.3:50052"};

TEST(CellRouterTest, PrefixKeyCoversWholePagesOfTheLeadingTokens) {
  EXPECT_FALSE(PrefixKey(Tokens(15, 1)).has_value());  // no whole page
  ASSERT_TRUE(PrefixKey(Tokens(16, 1)).has_value());
  // The partial page after the last whole one does not count.
  EXPECT_EQ(PrefixKey(Tokens(16, 1)), PrefixKey(Tokens(31, 1)));
  EXPECT_NE(PrefixKey(Tokens(16, 1)), PrefixKey(Tokens(32, 1)));
  // Past max_tokens the prompts share the key: a long shared system prompt
  // routes every conversation on it together.
  std::vector<int32_t> a = Tokens(1500, 1), b = a;
  b[1400] = 7;
  EXPECT_EQ(PrefixKey(a), PrefixKey(b));
  b[3] = 7;
  EXPECT_NE(PrefixKey(a), PrefixKey(b));
}

TEST(CellRouterTest, AffinityIsStableAndSpreadsDistinctPrefixes) {
  const std::vector<CellLoad> loads(3, CellLoad{true, 0, 0, 512});
  std::vector<int> counts(3, 0);
  for (int32_t p = 0; p < 3000; ++p) {
    const auto key = PrefixKey(Tokens(32, p * 64));
    const RouteDecision d = PickCell(loads, kIds, key, p);
    ASSERT_GE(d.cell, 0);
    EXPECT_EQ(d.reason, RouteReason::kPrefix);
    // The same key lands on the same cell whatever the turn or light load.
    std::vector<CellLoad> busier = loads;
    busier[(d.cell + 1) % 3].running = 40;
    EXPECT_EQ(PickCell(busier, kIds, key, p + 17).cell, d.cell);
    ++counts[d.cell];
  }
  for (int c : counts) EXPECT_NEAR(c, 1000, 150) << c;
}

TEST(CellRouterTest, AnAffinityCellTooFarBehindIsSpilled) {
  const auto key = PrefixKey(Tokens(64, 5));
  std::vector<CellLoad> loads(3, CellLoad{true, 0, 0, 512});
  const int home = PickCell(loads, kIds, key, 0).cell;
  loads[home].waiting = 8;  // at the bound: still home
  EXPECT_EQ(PickCell(loads, kIds, key, 0).cell, home);
  loads[home].waiting = 9;
  const RouteDecision d = PickCell(loads, kIds, key, 0);
  EXPECT_NE(d.cell, home);
  EXPECT_EQ(d.reason, RouteReason::kSpilled);
  // Home drops out when it is not ready, and affinity moves to another cell.
  loads[home] = CellLoad{};
  const RouteDecision moved = PickCell(loads, kIds, key, 0);
  EXPECT_NE(moved.cell, home);
  EXPECT_EQ(moved.reason, RouteReason::kPrefix);
}

TEST(PrefixTrackerTest, MatchesLeadingPagesAndForgetsTheOldest) {
  const std::vector<int32_t> prompt = Tokens(64, 1);  // 4 pages
  const std::vector<uint64_t> chain = PageChain(prompt);
  ASSERT_EQ(chain.size(), 4u);
  EXPECT_EQ(PageChain(Tokens(63, 1)).size(), 3u);
  // Chained: the same page after another prefix hashes differently.
  std::vector<int32_t> other = prompt;
  other[0] = 999;
  EXPECT_NE(PageChain(other)[3], chain[3]);
  PrefixTracker tracker(/*pages_per_cell=*/6);
  tracker.Record("a", absl::MakeSpan(chain).subspan(0, 2));
  EXPECT_EQ(tracker.Matched("a", chain), 2);
  EXPECT_EQ(tracker.Matched("b", chain), 0);
  tracker.Record("a", chain);
  EXPECT_EQ(tracker.Matched("a", chain), 4);
  // Four more pages: the bound drops the least recent (the deep ones
  // first: a prefix outlives its tails).
  tracker.Record("a", PageChain(Tokens(64, 500)));
  EXPECT_EQ(tracker.Matched("a", chain), 2);
  tracker.Forget("a");
  EXPECT_EQ(tracker.Matched("a", chain), 0);
}

TEST(CellRouterTest, TheCellThatGotAConversationGetsItsNextTurn) {
  std::vector<CellLoad> loads(3, CellLoad{true, 0, 0, 4096});
  PrefixTracker tracker;
  // Turn 1 of 12 conversations sharing nothing; each next turn extends
  // the last prompt by 200 tokens (past the 1,024-token routing key).
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> home;
  for (int c = 0; c < 12; ++c) {
    prompts.push_back(Tokens(900, 10000 * (c + 1)));
    home.push_back(RouteByCache(loads, kIds, prompts[c], CellPhase::kServe,
                                c, &tracker).cell);
  }
  for (int turn = 0; turn < 3; ++turn) {
    for (int c = 0; c < 12; ++c) {
      const std::vector<int32_t> more = Tokens(200, 500000 + 1000 * c + turn);
      prompts[c].insert(prompts[c].end(), more.begin(), more.end());
      const RouteDecision d = RouteByCache(loads, kIds, prompts[c],
                                           CellPhase::kServe, c, &tracker);
      EXPECT_EQ(d.cell, home[c]) << c;
      EXPECT_EQ(d.reason, RouteReason::kCached);
    }
  }
  // Too little in common (under half the pages): the rendezvous key rules.
  std::vector<int32_t> mostly_new = Tokens(48, 10000);
  const std::vector<int32_t> tail = Tokens(200, 777777);
  mostly_new.insert(mostly_new.end(), tail.begin(), tail.end());
  EXPECT_NE(RouteByCache(loads, kIds, mostly_new, CellPhase::kServe, 0,
                         &tracker).reason,
            RouteReason::kCached);
  // A cached cell too far behind is spilled.
  loads[home[0]].waiting = 9;
  prompts[0].push_back(1);
  EXPECT_NE(RouteByCache(loads, kIds, prompts[0], CellPhase::kServe, 0,
                         &tracker).cell,
            home[0]);
  EXPECT_FALSE(CountsAsWaiting(RouteReason::kCached));
  EXPECT_TRUE(CountsAsWaiting(RouteReason::kLeastLoaded));
}

TEST(CellRouterTest, SharedCacheTiesGoToTheLeastLoaded) {
  std::vector<CellLoad> loads(3, CellLoad{true, 0, 0, 4096});
  PrefixTracker tracker;
  const std::vector<int32_t> system = Tokens(512, 1);
  for (const std::string& id : kIds) tracker.Record(id, PageChain(system));
  loads[0].waiting = 3;
  loads[1].running = 2;
  std::vector<int32_t> prompt = system;
  prompt.push_back(42);
  const RouteDecision d =
      RouteByCache(loads, kIds, prompt, CellPhase::kServe, 0, &tracker);
  EXPECT_EQ(d.cell, 2);
  EXPECT_EQ(d.reason, RouteReason::kCached);
}

TEST(CellRouterTest, WithoutAPrefixTheLeastLoadedCellTakesTurns) {
  std::vector<CellLoad> loads = {{true, 2, 5, 512}, {true, 0, 9, 512},
                                 {true, 0, 3, 512}};
  RouteDecision d = PickCell(loads, kIds, std::nullopt, 0);
  EXPECT_EQ(d.cell, 2);  // no queue, fewest running
  EXPECT_EQ(d.reason, RouteReason::kLeastLoaded);
  loads[1].running = 3;  // cells 1 and 2 tie
  EXPECT_EQ(PickCell(loads, kIds, std::nullopt, 0).cell, 1);
  EXPECT_EQ(PickCell(loads, kIds, std::nullopt, 1).cell, 2);
  EXPECT_EQ(PickCell(loads, kIds, std::nullopt, 2).cell, 1);
  loads[1].ready = loads[2].ready = false;
  EXPECT_EQ(PickCell(loads, kIds, std::nullopt, 1).cell, 0);
  loads[0].ready = false;
  d = PickCell(loads, kIds, PrefixKey(Tokens(64, 1)), 0);
  EXPECT_EQ(d.cell, -1);
  EXPECT_EQ(d.reason, RouteReason::kNoneReady);
}

TEST(CellRouterTest, RouterChecksItsCellsAndCountsRoutes) {
  EXPECT_THAT(CellRouter::Create({}).status().message(),
              HasSubstr("names no cell"));
  EXPECT_THAT(CellRouter::Create({"a:1", "b:2", "a:1"}).status().message(),
              HasSubstr("names cell a:1 twice"));
  EXPECT_EQ(SplitTargets(" a:1, ,b:2,"),
            (std::vector<std::string>{"a:1", "b:2"}));
  auto router = CellRouter::Create({"127.0.0.1:1", "127.0.0.1:2"});
  ASSERT_TRUE(router.ok());
  // Not started: no cell is ready, so everything goes to cell 0.
  EXPECT_EQ((*router)->Pick(Tokens(4, 1)).reason, RouteReason::kNoneReady);
  (*router)->SetLoads({{true, 0, 0, 512}, {true, 0, 0, 512}});
  // Short prompts alternate; each routed one counts as waiting until the
  // next poll, so a burst spreads.
  const std::string first = (*router)->Pick(Tokens(4, 1)).target;
  const std::string second = (*router)->Pick(Tokens(4, 1)).target;
  EXPECT_NE(first, second);
  EXPECT_EQ((*router)->RoutedCounts(), (std::vector<int64_t>{2, 1}));
}

// Roles: a split prompt's first pick goes to a prefill cell, everything
// else to the cells that decode; with no decode cell ready a request is
// served wherever it can be, and no split is offered.
TEST(CellRouterTest, RolesSplitPrefillFromDecode) {
  EXPECT_EQ(ParseCellRole("prefill"), CellRole::kPrefill);
  EXPECT_EQ(ParseCellRole("decode"), CellRole::kDecode);
  EXPECT_EQ(ParseCellRole(""), CellRole::kBoth);
  auto router = CellRouter::Create({"p:1", "d:2", "d:3"});
  ASSERT_TRUE(router.ok());
  CellRouter& r = **router;
  r.SetLoads({{true, 0, 0, 512, CellRole::kPrefill},
              {true, 0, 0, 512, CellRole::kDecode},
              {true, 0, 0, 512, CellRole::kDecode}});
  EXPECT_TRUE(r.CanSplit());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r.Pick(Tokens(40, i), CellPhase::kPrefill).target, "p:1");
    EXPECT_NE(r.Pick(Tokens(40, i)).target, "p:1");
  }
  r.SetLoads({{true, 0, 0, 512, CellRole::kPrefill},
              {false, 0, 0, 512, CellRole::kDecode},
              {false, 0, 0, 512, CellRole::kDecode}});
  EXPECT_FALSE(r.CanSplit());
  EXPECT_EQ(r.Pick(Tokens(40, 1)).target, "p:1");  // the only ready cell
}

TEST(CellRouterTest, DnsSourcesParseOrSayWhy) {
  auto s = ParseCellSource("dns:///cells.pdserve.svc:50052");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->dns);
  EXPECT_EQ(s->host, "cells.pdserve.svc");
  EXPECT_EQ(s->port, "50052");
  EXPECT_FALSE(ParseCellSource("10.0.0.1:50052")->dns);
  for (const char* bad : {"dns:///cells", "dns:///:50052", "dns:///c:0",
                          "dns:///c:99999", "dns:///c:x"}) {
    EXPECT_THAT(ParseCellSource(bad).status().message(),
                HasSubstr("dns:///NAME:PORT with a port in [1, 65535]"))
        << bad;
  }
  // The system resolver: localhost has a loopback address.
  auto local = ResolveAddresses("localhost", "7");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_THAT(*local, ::testing::Contains(::testing::AnyOf(
                          std::string("127.0.0.1:7"), std::string("[::1]:7"))));
  EXPECT_FALSE(ResolveAddresses("no-such-host.invalid", "7").ok());
}

// Cells behind a dns name come and go with its addresses; a failed
// resolution keeps the last good set; a stub handed out stays usable after
// its cell left; with no address at all Pick returns no stub.
TEST(CellRouterTest, DnsCellsJoinAndLeaveAsTheNameResolves) {
  std::vector<std::string> answer = {"10.0.0.1:50052", "10.0.0.2:50052"};
  bool fail = false;
  CellRouter::Options options;
  options.resolver = [&](const std::string& host, const std::string& port)
      -> absl::StatusOr<std::vector<std::string>> {
    EXPECT_EQ(host, "cells");
    EXPECT_EQ(port, "50052");
    if (fail) return absl::UnavailableError("SERVFAIL");
    return answer;
  };
  auto router = CellRouter::Create({"dns:///cells:50052", "10.0.0.9:1"}, options);
  ASSERT_TRUE(router.ok()) << router.status();
  CellRouter& r = **router;
  EXPECT_EQ(r.Targets(), (std::vector<std::string>{
                             "10.0.0.1:50052", "10.0.0.2:50052", "10.0.0.9:1"}));
  r.SetLoads({{true, 0, 0, 512}, {true, 0, 0, 512}, {false, 0, 0, 512}});
  CellRouter::Route held;
  for (int i = 0; i < 4; ++i) {
    CellRouter::Route route = r.Pick(Tokens(4, 1));
    ASSERT_NE(route.stub, nullptr);
    EXPECT_NE(route.target, "10.0.0.9:1");  // not ready
    if (route.target == "10.0.0.1:50052") held = route;
  }
  ASSERT_NE(held.stub, nullptr);

  // 10.0.0.1 goes, 10.0.0.3 comes: the kept cell keeps its load.
  answer = {"10.0.0.2:50052", "10.0.0.3:50052"};
  r.Resolve();
  EXPECT_EQ(r.Targets(), (std::vector<std::string>{
                             "10.0.0.2:50052", "10.0.0.9:1", "10.0.0.3:50052"}));
  EXPECT_TRUE(r.Loads()[0].ready);
  EXPECT_FALSE(r.Loads()[2].ready);  // until its first poll
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r.Pick(Tokens(4, 1)).target, "10.0.0.2:50052");
  EXPECT_NE(held.stub, nullptr);  // still owned by the call that holds it

  fail = true;
  r.Resolve();
  EXPECT_EQ(r.Targets().size(), 3u);

  fail = false;
  answer = {};
  auto dns_only = CellRouter::Create({"dns:///cells:50052"}, options);
  ASSERT_TRUE(dns_only.ok());
  EXPECT_TRUE((*dns_only)->Targets().empty());
  EXPECT_EQ((*dns_only)->Pick(Tokens(4, 1)).stub, nullptr);
  EXPECT_FALSE((*dns_only)->WaitUntilReady(/*all=*/false, 0));
}

}  // namespace
}  // namespace pdserve::frontend
