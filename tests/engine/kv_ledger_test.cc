// The KV ledger (engine/kv/kv_ledger.h) and the pool taking its pages
// (KvPool::AssignPages / AssignPrefix): the scheduler chooses, the engine's
// pool validates and follows.
#include "engine/kv/kv_ledger.h"

#include <vector>

#include "engine/kv/kv_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<int32_t> Tokens(int n, int32_t base) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(base + i);
  return t;
}

TEST(KvLedgerTest, SharesWrittenPrefixPagesAndCountsThemOnce) {
  KvLedger l(/*num_pages=*/8, /*page_size=*/4, /*prefix_cache=*/true);
  const std::vector<int32_t> prompt = Tokens(10, 100);
  ASSERT_TRUE(l.Open(1, {}, prompt).ok());
  auto a = l.Grow(1, 10);
  ASSERT_TRUE(a.ok());
  EXPECT_THAT(*a, ElementsAre(0, 1, 2));
  EXPECT_TRUE(l.Match(prompt, 2).empty());  // not written yet
  l.MarkWritten(1, 10);
  const std::vector<int32_t> hit = l.Match(prompt, 2);
  EXPECT_THAT(hit, ElementsAre(0, 1));
  EXPECT_EQ(l.UnheldPages(hit), 0);  // held by 1: sharing takes no free page
  ASSERT_TRUE(l.Open(2, hit, prompt).ok());
  auto b = l.Grow(2, 10);
  ASSERT_TRUE(b.ok());
  EXPECT_THAT(*b, ElementsAre(3));
  EXPECT_EQ(l.free_pages(), 4);  // 0, 1 counted once; 2 and 3 own pages
  l.Close(1);
  l.Close(2);
  EXPECT_EQ(l.free_pages(), 8);
  EXPECT_EQ(l.cached_pages(), 2);  // the indexed prompt pages stay cached
  EXPECT_EQ(l.UnheldPages(l.Match(prompt, 2)), 2);
}

TEST(KvLedgerTest, ReclaimsCachedPagesLastAndForgetsThem) {
  KvLedger l(4, 4, true);
  const std::vector<int32_t> prompt = Tokens(8, 1);
  ASSERT_TRUE(l.Open(1, {}, prompt).ok());
  ASSERT_TRUE(l.Grow(1, 8).ok());
  l.MarkWritten(1, 8);
  l.Close(1);
  ASSERT_TRUE(l.Open(2, {}, Tokens(16, 500)).ok());
  auto g = l.Grow(2, 12);  // 2 plain free pages, then a cached one
  ASSERT_TRUE(g.ok());
  EXPECT_THAT(*g, ElementsAre(2, 3, 0));
  EXPECT_TRUE(l.Match(prompt, 2).empty());  // page 0 reused: the chain is gone
  EXPECT_EQ(l.Grow(2, 20).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(l.Grow(2, 20).status().message(),
              HasSubstr("needs 2 more KV pages for 20 tokens; 1 of 4"));
}

TEST(KvLedgerTest, UnwrittenCloseLeavesNoPrefix) {
  KvLedger l(8, 4, true);
  const std::vector<int32_t> prompt = Tokens(9, 1);
  ASSERT_TRUE(l.Open(1, {}, prompt).ok());
  ASSERT_TRUE(l.Grow(1, 9).ok());
  l.MarkWritten(1, 9);  // planned (optimistic commit) ...
  l.Close(1, /*written=*/false);  // ... then cancelled before it ran
  EXPECT_TRUE(l.Match(prompt, 2).empty());
  EXPECT_EQ(l.cached_pages(), 0);
}

KvGeometry Geometry() {
  KvModelShape s;
  s.num_attention_layers = 1;
  s.kv_dim = 8;
  s.max_context = 64;
  auto g = ComputeKvGeometry(s, {.bytes = 1 << 20}, 4, 8, nullptr);
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

TEST(KvPoolLedgerTest, TakesThePlansPagesAndValidatesThem) {
  auto pool = KvPool::Create(Geometry(), KvPoolMemory::kHost, true);
  ASSERT_TRUE(pool.ok());
  KvPool& p = **pool;
  const std::vector<int32_t> prompt = Tokens(10, 100);
  ASSERT_TRUE(p.Add(1, 16).ok());
  ASSERT_TRUE(p.AssignPrefix(1, prompt, {}, 10).ok());
  const std::vector<int32_t> pages = {5, 2, 7};
  ASSERT_TRUE(p.AssignPages(1, pages).ok());
  EXPECT_THAT(p.PageTable(1), ElementsAre(5, 2, 7));
  EXPECT_TRUE(p.Reserve(1, 12).ok());  // covered: nothing to take
  EXPECT_EQ(p.Reserve(1, 13).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(p.Add(2, 16).ok());
  const std::vector<int32_t> taken = {2};
  EXPECT_THAT(p.AssignPages(2, taken).message(),
              HasSubstr("KV page 2 of the plan is out of range or in use"));
  const std::vector<int32_t> twice = {3, 3};
  EXPECT_THAT(p.AssignPages(2, twice).message(), HasSubstr("listed twice"));
  EXPECT_TRUE(p.PageTable(2).empty());  // all-or-nothing
  // The prefix: only pages written and indexed with these very tokens.
  ASSERT_TRUE(p.MarkWritten(1, 10).ok());
  p.IndexWritten(1, prompt);
  ASSERT_TRUE(p.Remove(2).ok());
  ASSERT_TRUE(p.Add(3, 16).ok());
  const std::vector<int32_t> prefix = {5, 2};
  auto covered = p.AssignPrefix(3, prompt, prefix, 10);
  ASSERT_TRUE(covered.ok()) << covered.status();
  EXPECT_EQ(*covered, 8);
  ASSERT_TRUE(p.Add(4, 16).ok());
  const std::vector<int32_t> wrong_order = {2, 5};
  EXPECT_THAT(p.AssignPrefix(4, prompt, wrong_order, 10).status().message(),
              HasSubstr("KV page 2 (prefix page 0) does not hold those"));
  std::vector<int32_t> other = prompt;
  other[5] = 0;
  EXPECT_THAT(p.AssignPrefix(4, other, prefix, 10).status().message(),
              HasSubstr("KV page 2 (prefix page 1) does not hold those"));
  // Shared pages stay with 3 when 1 goes; 1's own page 7 is free again.
  ASSERT_TRUE(p.Remove(1).ok());
  EXPECT_THAT(p.PageTable(3), ElementsAre(5, 2));
  const std::vector<int32_t> again = {7};
  EXPECT_TRUE(p.AssignPages(4, again).ok());
}

}  // namespace
}  // namespace pdserve
