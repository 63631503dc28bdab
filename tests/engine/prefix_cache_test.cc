// Automatic prefix caching, the pure parts: the content index of full pages
// (PrefixCache), the reference-counted allocator with its cache of released
// pages (PageAllocator), and the pool that ties them (KvPool with
// prefix_cache): sharing, keeping released pages, reclaiming the oldest.
#include "engine/kv/prefix_cache.h"

#include <numeric>
#include <vector>

#include "engine/kv/kv_pool.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

constexpr int64_t kPage = 4;

std::vector<int32_t> Range(int32_t first, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

absl::Span<const int32_t> PageOf(const std::vector<int32_t>& t, int64_t k) {
  return absl::MakeConstSpan(t).subspan(k * kPage, kPage);
}

TEST(PrefixCacheTest, MatchesTheLongestIndexedChainUpToTheCap) {
  PrefixCache cache(16, kPage);
  const std::vector<int32_t> a = Range(100, 12);  // three pages
  cache.Insert(-1, 5, PageOf(a, 0));
  cache.Insert(5, 9, PageOf(a, 1));
  cache.Insert(9, 2, PageOf(a, 2));
  EXPECT_EQ(cache.size(), 3);
  EXPECT_EQ(cache.Match(a, 8), (std::vector<int32_t>{5, 9, 2}));
  EXPECT_EQ(cache.Match(a, 2), (std::vector<int32_t>{5, 9}));
  // Diverging in the second page: only the first matches.
  std::vector<int32_t> b = a;
  b[6] = 7;
  EXPECT_EQ(cache.Match(b, 8), (std::vector<int32_t>{5}));
  // A partial last page never matches; another first page nothing.
  EXPECT_EQ(cache.Match(absl::MakeConstSpan(a).subspan(0, 7), 8),
            (std::vector<int32_t>{5}));
  EXPECT_TRUE(cache.Match(Range(0, 12), 8).empty());
  // The same tokens after another first page are another page.
  std::vector<int32_t> c = Range(0, 4);
  c.insert(c.end(), a.begin() + 4, a.end());
  EXPECT_TRUE(cache.Match(c, 8).empty());
}

TEST(PrefixCacheTest, ErasingAPageOrphansEveryPageAfterIt) {
  PrefixCache cache(16, kPage);
  const std::vector<int32_t> a = Range(100, 12);
  cache.Insert(-1, 5, PageOf(a, 0));
  cache.Insert(5, 9, PageOf(a, 1));
  cache.Insert(9, 2, PageOf(a, 2));
  cache.Erase(9);  // page 9 now holds something else
  EXPECT_FALSE(cache.Contains(9));
  EXPECT_EQ(cache.Match(a, 8), (std::vector<int32_t>{5}));
  // Page 9 indexed again with the same tokens: page 2 stays orphaned (its
  // parent link names page 9's old generation), so the match stops at 9.
  cache.Insert(5, 9, PageOf(a, 1));
  EXPECT_EQ(cache.Match(a, 8), (std::vector<int32_t>{5, 9}));
  // Re-indexing the third page under the new parent restores the chain.
  cache.Erase(2);
  cache.Insert(9, 2, PageOf(a, 2));
  EXPECT_EQ(cache.Match(a, 8), (std::vector<int32_t>{5, 9, 2}));
}

TEST(PrefixCacheTest, SameContentIsIndexedOnceAndParentsMustBeIndexed) {
  PrefixCache cache(16, kPage);
  const std::vector<int32_t> a = Range(100, 8);
  cache.Insert(-1, 1, PageOf(a, 0));
  cache.Insert(-1, 3, PageOf(a, 0));  // same content on another page
  EXPECT_FALSE(cache.Contains(3));
  cache.Insert(4, 6, PageOf(a, 1));  // parent 4 is not indexed
  EXPECT_FALSE(cache.Contains(6));
  cache.Insert(1, 6, absl::MakeConstSpan(a).subspan(4, 3));  // short page
  EXPECT_FALSE(cache.Contains(6));
  EXPECT_EQ(cache.size(), 1);
}

TEST(PageAllocatorTest, ReferencesAndTheCacheOfReleasedPages) {
  PageAllocator a(3);
  const int32_t p0 = *a.Allocate(), p1 = *a.Allocate(), p2 = *a.Allocate();
  EXPECT_EQ(a.num_free(), 0);
  ASSERT_TRUE(a.Retain(p0).ok());  // shared by two holders
  ASSERT_TRUE(a.Free(p0, /*keep_cached=*/true).ok());
  EXPECT_TRUE(a.in_use(p0));
  ASSERT_TRUE(a.Free(p0, true).ok());  // last reference: cached
  ASSERT_TRUE(a.Free(p1, true).ok());
  ASSERT_TRUE(a.Free(p2, false).ok());  // plain free
  EXPECT_EQ(a.num_free(), 3);
  EXPECT_EQ(a.num_cached(), 2);
  EXPECT_EQ(a.num_used(), 0);
  // Plain free pages go first, then the oldest cached one.
  int32_t reclaimed = 0;
  EXPECT_EQ(*a.Allocate(&reclaimed), p2);
  EXPECT_EQ(reclaimed, -1);
  // A cached page taken back by a reader leaves the cache.
  ASSERT_TRUE(a.Retain(p1).ok());
  EXPECT_EQ(a.num_cached(), 1);
  EXPECT_EQ(*a.Allocate(&reclaimed), p0);
  EXPECT_EQ(reclaimed, p0);
  EXPECT_EQ(a.Allocate().status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a.Free(p2).ok(), true);
  EXPECT_EQ(a.Free(p2).message(), "KV page 2 is not in use (double free)");
  EXPECT_EQ(a.Retain(p2).message(), "KV page 2 is neither in use nor cached");
}

std::unique_ptr<KvPool> MakePrefixPool(int64_t pages) {
  KvModelShape shape;
  shape.num_attention_layers = 1;
  shape.kv_dim = 8;
  shape.max_context = 1024;
  absl::StatusOr<KvGeometry> g =
      ComputeKvGeometry(shape, {.bytes = pages * 4096}, kPage, 8, nullptr);
  EXPECT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->num_pages, pages);
  auto pool = KvPool::Create(*g, KvPoolMemory::kHost, /*prefix_cache=*/true);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return std::move(*pool);
}

// Writes `tokens` for `id` as the engine does: reserve, mark, index.
void Write(KvPool& pool, SequenceId id, const std::vector<int32_t>& tokens) {
  ASSERT_TRUE(pool.Reserve(id, static_cast<int64_t>(tokens.size())).ok());
  ASSERT_TRUE(pool.MarkWritten(id, static_cast<int64_t>(tokens.size())).ok());
  pool.IndexWritten(id, tokens);
}

TEST(KvPoolPrefixTest, SharesKeepsAndReclaimsPages) {
  std::unique_ptr<KvPool> pool = MakePrefixPool(8);
  const std::vector<int32_t> a = Range(10, 10);  // 2 full pages + 2 tokens
  ASSERT_TRUE(pool->Add(1, 32).ok());
  Write(*pool, 1, a);
  const std::vector<int32_t> a_pages(pool->PageTable(1).begin(),
                                     pool->PageTable(1).end());
  ASSERT_EQ(a_pages.size(), 3u);
  // A second sequence with the same 2 pages and another tail shares them.
  std::vector<int32_t> b(a.begin(), a.begin() + 8);
  b.push_back(99);
  ASSERT_TRUE(pool->Add(2, 32).ok());
  EXPECT_EQ(*pool->AttachPrefix(2, b, 8), 8);
  EXPECT_EQ(pool->PageTable(2)[0], a_pages[0]);
  EXPECT_EQ(pool->PageTable(2)[1], a_pages[1]);
  EXPECT_EQ(pool->Stats().used_pages, 3);
  Write(*pool, 2, b);
  EXPECT_EQ(pool->Stats().used_pages, 4);  // b's own third page
  // Released: indexed pages stay cached (free, kept); partial pages go.
  ASSERT_TRUE(pool->Remove(1).ok());
  ASSERT_TRUE(pool->Remove(2).ok());
  KvPoolStats s = pool->Stats();
  EXPECT_EQ(s.free_pages, 8);
  EXPECT_EQ(s.cached_pages, 2);
  // Still attachable after both are gone, capped by max_pages.
  ASSERT_TRUE(pool->Add(3, 32).ok());
  EXPECT_EQ(*pool->AttachPrefix(3, a, 1), 4);
  ASSERT_TRUE(pool->Remove(3).ok());
  // Filling the pool reclaims the cached pages (oldest first) and unindexes
  // them: the prefix is gone.
  ASSERT_TRUE(pool->Add(4, 32).ok());
  Write(*pool, 4, Range(500, 30));  // 8 pages: every one
  ASSERT_TRUE(pool->Remove(4).ok());
  ASSERT_TRUE(pool->Add(5, 32).ok());
  EXPECT_EQ(*pool->AttachPrefix(5, a, 8), 0);
}

TEST(KvPoolPrefixTest, RefusedForHybridModelsAndANoOpWithoutIt) {
  KvModelShape shape;
  shape.num_attention_layers = 1;
  shape.kv_dim = 8;
  shape.max_context = 64;
  shape.num_linear_layers = 1;
  shape.conv_state_floats = 4;
  shape.recurrent_state_floats = 4;
  auto g = ComputeKvGeometry(shape, {.bytes = 1 << 20}, kPage, 2, nullptr);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(KvPool::Create(*g, KvPoolMemory::kHost, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto plain = KvPool::Create(*g);
  ASSERT_TRUE(plain.ok());
  ASSERT_TRUE((*plain)->Add(1, 16).ok());
  EXPECT_EQ(*(*plain)->AttachPrefix(1, Range(0, 8), 8), 0);
  EXPECT_FALSE((*plain)->prefix_cache_enabled());
}

}  // namespace
}  // namespace pdserve
