// KV pool geometry, page allocator and pool: property tests over random
// interleavings, resident memory following the tokens written.
#include "engine/kv/kv_pool.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

KvModelShape SmallShape() {
  KvModelShape s;
  s.num_attention_layers = 2;
  s.kv_dim = 128;  // 2 layers * 2 * 16 tokens * 128 * 4 B = 32 KiB per page
  s.max_context = 4096;
  return s;
}

std::function<absl::StatusOr<int64_t>()> Fixed(int64_t bytes) {
  return [bytes]() -> absl::StatusOr<int64_t> { return bytes; };
}

TEST(MemInfoTest, ParsesMemAvailable) {
  const char* text =
      "MemTotal:       16384000 kB\n"
      "MemFree:         1000000 kB\n"
      "MemAvailable:    8000000 kB\n"
      "Buffers:          100 kB\n";
  absl::StatusOr<int64_t> bytes = ParseMemAvailable(text);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, int64_t{8000000} * 1024);
  EXPECT_EQ(ParseMemAvailable("MemTotal: 5 kB\n").status().message(),
            "no MemAvailable line in meminfo");
  EXPECT_FALSE(ParseMemAvailable("MemAvailable: x kB\n").ok());
  EXPECT_FALSE(ParseMemAvailable("MemAvailable: 12\n").ok());
  EXPECT_TRUE(ReadMemAvailableBytes().ok());
}

TEST(GeometryTest, ShapeFromModelConfig) {
  ModelConfig c;  // SmolLM2-135M: 30 layers, 3 KV heads of 64
  c.num_layers = 30;
  c.num_heads = 9;
  c.num_kv_heads = 3;
  c.head_dim = 64;
  c.max_context = 8192;
  const KvModelShape s = KvModelShape::FromConfig(c);
  EXPECT_EQ(s.num_attention_layers, 30);
  EXPECT_EQ(s.kv_dim, 192);
  EXPECT_EQ(s.max_context, 8192);
  EXPECT_EQ(s.num_linear_layers, 0);
  absl::StatusOr<KvGeometry> g =
      ComputeKvGeometry(s, {.bytes = int64_t{1} << 30}, 16, 64, nullptr);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->bytes_per_token_per_layer, 1536);
  EXPECT_EQ(g->bytes_per_token, 46080);
  EXPECT_EQ(g->bytes_per_page, 737280);  // 180 OS pages exactly
  EXPECT_EQ(g->num_pages, (int64_t{1} << 30) / 737280);
  EXPECT_EQ(g->total_tokens, g->num_pages * 16);
}

TEST(GeometryTest, FromByteBudget) {
  absl::StatusOr<KvGeometry> g =
      ComputeKvGeometry(SmallShape(), {.bytes = 1 << 20}, 16, 8, nullptr);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->bytes_per_token_per_layer, 2 * 128 * 4);
  EXPECT_EQ(g->bytes_per_token, 2 * 2 * 128 * 4);
  EXPECT_EQ(g->bytes_per_page, 32768);
  EXPECT_EQ(g->num_pages, 32);
  EXPECT_EQ(g->total_tokens, 32 * 16);
  EXPECT_EQ(g->linear_state_bytes_per_sequence, 0);
  EXPECT_EQ(g->budget_bytes, 1 << 20);
}

TEST(GeometryTest, FromFractionOfAvailableMemory) {
  absl::StatusOr<KvGeometry> g = ComputeKvGeometry(
      SmallShape(), {.fraction = 0.25}, 16, 8, Fixed(int64_t{4} << 20));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->budget_bytes, 1 << 20);
  EXPECT_EQ(g->num_pages, 32);
}

TEST(GeometryTest, PageBytesRoundUpToOsPage) {
  KvModelShape s;
  s.num_attention_layers = 5;
  s.kv_dim = 32;  // stories260K: 5 * 2 * 16 * 32 * 4 = 20480 = 5 OS pages
  absl::StatusOr<KvGeometry> g =
      ComputeKvGeometry(s, {.bytes = 1 << 20}, 7, 4, nullptr);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->bytes_per_page % OsPageBytes(), 0);
  EXPECT_GE(g->bytes_per_page, 5 * 2 * 7 * 32 * 4);
}

TEST(GeometryTest, LinearStateIsPaidFromBudget) {
  KvModelShape s = SmallShape();
  s.num_linear_layers = 3;
  s.conv_state_floats = 1000;
  s.recurrent_state_floats = 3000;  // 3 * 4000 * 4 = 48000 B per sequence
  absl::StatusOr<KvGeometry> g =
      ComputeKvGeometry(s, {.bytes = 1 << 20}, 16, 4, nullptr);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->linear_state_bytes_per_sequence, 48000);
  const int64_t state = RoundUpToOsPage(48000) * 4;
  EXPECT_EQ(g->num_pages, ((1 << 20) - state) / 32768);
}

TEST(GeometryTest, Errors) {
  EXPECT_EQ(
      ComputeKvGeometry(SmallShape(), {}, 16, 8, nullptr).status().message(),
      "KV memory budget needs exactly one of bytes or fraction; got "
      "bytes=0 fraction=0");
  EXPECT_EQ(
      ComputeKvGeometry(SmallShape(), {.fraction = 1.5}, 16, 8, Fixed(1 << 30))
          .status()
          .message(),
      "KV memory fraction must be in (0, 1], got 1.5");
  EXPECT_EQ(ComputeKvGeometry(SmallShape(), {.bytes = 1000}, 16, 8, nullptr)
                .status()
                .message(),
            "KV memory budget of 1000 bytes (0 of them for linear-attention "
            "state of 8 sequences) holds no KV page of 32768 bytes (16 "
            "tokens x 2048 bytes)");
  EXPECT_EQ(ComputeKvGeometry(SmallShape(), {.bytes = 1 << 20}, 0, 8, nullptr)
                .status()
                .message(),
            "KV page size must be positive, got 0");
  absl::StatusOr<KvGeometry> failing = ComputeKvGeometry(
      SmallShape(), {.fraction = 0.5}, 16, 8, []() -> absl::StatusOr<int64_t> {
        return absl::UnavailableError("no meminfo");
      });
  EXPECT_EQ(failing.status().code(), absl::StatusCode::kUnavailable);
}

TEST(PageAllocatorTest, AllocFreeAndDoubleFree) {
  PageAllocator a(3);
  EXPECT_EQ(*a.Allocate(), 0);
  EXPECT_EQ(*a.Allocate(), 1);
  EXPECT_EQ(*a.Allocate(), 2);
  absl::StatusOr<int32_t> none = a.Allocate();
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(none.status().message(), "no free KV page: all 3 pages are in use");
  EXPECT_TRUE(a.Free(1).ok());
  EXPECT_EQ(a.Free(1).message(), "KV page 1 is not in use (double free)");
  EXPECT_EQ(a.Free(7).message(), "KV page 7 is out of range [0, 3)");
  EXPECT_EQ(*a.Allocate(), 1);  // LIFO
}

std::unique_ptr<KvPool> MakePool(int64_t pages, int64_t max_seqs,
                                 KvModelShape shape = SmallShape()) {
  absl::StatusOr<KvGeometry> g =
      ComputeKvGeometry(shape, {.bytes = pages * 32768}, 16, max_seqs, nullptr);
  EXPECT_TRUE(g.ok()) << g.status();
  absl::StatusOr<std::unique_ptr<KvPool>> pool = KvPool::Create(*g);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return std::move(*pool);
}

TEST(KvPoolTest, ReserveIsAllOrNothing) {
  std::unique_ptr<KvPool> pool = MakePool(4, 4);
  ASSERT_TRUE(pool->Add(1, 64).ok());
  ASSERT_TRUE(pool->Add(2, 64).ok());
  ASSERT_TRUE(pool->Reserve(1, 40).ok());  // 3 pages
  EXPECT_EQ(pool->PageTable(1).size(), 3u);
  absl::Status st = pool->Reserve(2, 20);  // 2 pages, 1 free
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(st.message(),
            "sequence 2 needs 2 more KV pages for 20 tokens; 1 of 4 pages "
            "are free");
  EXPECT_TRUE(pool->PageTable(2).empty());
  EXPECT_EQ(pool->Stats().free_pages, 1);
  EXPECT_EQ(pool->Add(1, 16).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(pool->Add(9, 65).message(),
            "sequence 9 asks for 65 tokens; the KV pool holds [1, 64]");
  EXPECT_EQ(pool->Reserve(7, 1).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(pool->Remove(1).ok());
  EXPECT_EQ(pool->Stats().free_pages, 4);
  EXPECT_EQ(pool->Remove(1).code(), absl::StatusCode::kNotFound);
}

TEST(KvPoolTest, MaxSequences) {
  std::unique_ptr<KvPool> pool = MakePool(4, 2);
  ASSERT_TRUE(pool->Add(1, 16).ok());
  ASSERT_TRUE(pool->Add(2, 16).ok());
  EXPECT_EQ(pool->Add(3, 16).message(),
            "KV pool holds its maximum of 2 sequences");
}

// Random interleavings of admit / write (reserve + advance) / cancel /
// finish. Invariants after every operation: each page is owned by at most one
// sequence, used + free == total, the pool's view equals a model of it; at
// the end free capacity returns exactly to its start.
TEST(KvPoolPropertyTest, RandomInterleavingsNeverLeakOrDoubleAssign) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    std::unique_ptr<KvPool> pool = MakePool(40, 12);
    const KvPoolStats start = pool->Stats();
    std::map<SequenceId, int64_t> written;  // model: tokens per live seq
    SequenceId next_id = 1;
    for (int op = 0; op < 2000; ++op) {
      const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
      if (kind < 2 || written.empty()) {  // admit
        absl::Status st = pool->Add(next_id, 400);
        if (written.size() < 12) {
          ASSERT_TRUE(st.ok()) << st;
          written[next_id] = 0;
        } else {
          ASSERT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
        }
        ++next_id;
        continue;
      }
      auto it = written.begin();
      std::advance(it, std::uniform_int_distribution<size_t>(
                           0, written.size() - 1)(rng));
      const SequenceId id = it->first;
      if (kind < 8) {  // write k tokens and advance
        const int64_t k = std::uniform_int_distribution<int64_t>(1, 40)(rng);
        const int64_t target = std::min<int64_t>(it->second + k, 400);
        const int64_t need = pool->PagesNeeded(id, target);
        const int64_t free_before = pool->Stats().free_pages;
        absl::Status st = pool->Reserve(id, target);
        if (need > free_before) {
          ASSERT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
          ASSERT_EQ(pool->Stats().free_pages, free_before);
        } else {
          ASSERT_TRUE(st.ok()) << st;
          ASSERT_TRUE(pool->MarkWritten(id, target).ok());
          it->second = target;
        }
      } else {  // cancel or finish: both release at once
        ASSERT_TRUE(pool->Remove(id).ok());
        written.erase(it);
      }
      // Invariants.
      std::set<int32_t> owned;
      int64_t pages = 0, tokens = 0;
      for (const auto& [sid, n] : written) {
        absl::Span<const int32_t> table = pool->PageTable(sid);
        ASSERT_EQ(static_cast<int64_t>(table.size()), (n + 15) / 16);
        for (int32_t p : table) {
          ASSERT_TRUE(owned.insert(p).second) << "page " << p << " twice";
          ASSERT_GE(p, 0);
          ASSERT_LT(p, 40);
        }
        pages += table.size();
        tokens += n;
      }
      KvPoolStats s = pool->Stats();
      ASSERT_EQ(s.used_pages, pages);
      ASSERT_EQ(s.used_pages + s.free_pages, s.total_pages);
      ASSERT_EQ(s.used_tokens, tokens);
      ASSERT_EQ(s.sequences, static_cast<int64_t>(written.size()));
    }
    for (const auto& [sid, n] : written) ASSERT_TRUE(pool->Remove(sid).ok());
    KvPoolStats end = pool->Stats();
    EXPECT_EQ(end.free_pages, start.free_pages);
    EXPECT_EQ(end.free_tokens, start.free_tokens);
    EXPECT_EQ(end.used_tokens, 0);
    EXPECT_EQ(end.sequences, 0);
  }
}

// Physical memory follows the tokens written, not the capacity, and goes
// back to the OS when a sequence ends.
TEST(KvPoolTest, ResidentMemoryFollowsTokensWritten) {
  std::unique_ptr<KvPool> pool = MakePool(256, 4);  // 8 MiB mapped
  EXPECT_EQ(pool->ResidentBytes(), 0);
  ASSERT_TRUE(pool->Add(1, 4096).ok());  // capacity 4096 tokens
  EXPECT_EQ(pool->ResidentBytes(), 0);
  ASSERT_TRUE(pool->Reserve(1, 64).ok());
  KvStorage& kv = pool->storage();
  for (int32_t page : pool->PageTable(1)) {
    for (int64_t layer = 0; layer < kv.num_layers(); ++layer) {
      std::memset(kv.keys(page, layer), 1, 16 * 128 * 4);
      std::memset(kv.values(page, layer), 1, 16 * 128 * 4);
    }
  }
  const int64_t resident = pool->ResidentBytes();
  EXPECT_EQ(resident, 4 * 32768);  // 64 tokens, not 4096
  EXPECT_EQ(pool->Stats().used_bytes, 4 * 32768);
  ASSERT_TRUE(pool->Remove(1).ok());
  EXPECT_EQ(pool->ResidentBytes(), 0);
  // A reused page reads as zeros.
  ASSERT_TRUE(pool->Add(2, 16).ok());
  ASSERT_TRUE(pool->Reserve(2, 16).ok());
  EXPECT_EQ(pool->storage().keys(pool->PageTable(2)[0], 0)[5], 0.0f);
}

// A device backend's pool (kAccountingOnly) maps nothing but accounts
// exactly as a host pool does: same pages, page tables, slots and figures.
TEST(KvPoolTest, AccountingOnlyPoolMapsNothingAndAccountsTheSame) {
  KvModelShape shape = SmallShape();
  shape.num_linear_layers = 2;
  shape.conv_state_floats = 100;
  shape.recurrent_state_floats = 924;
  absl::StatusOr<KvGeometry> g =
      ComputeKvGeometry(shape, {.bytes = 1 << 20}, 16, 3, nullptr);
  ASSERT_TRUE(g.ok()) << g.status();
  auto host = KvPool::Create(*g, KvPoolMemory::kHost);
  auto device = KvPool::Create(*g, KvPoolMemory::kAccountingOnly);
  ASSERT_TRUE(host.ok() && device.ok());
  EXPECT_TRUE((*host)->has_storage());
  EXPECT_FALSE((*device)->has_storage());
  for (KvPool* p : {host->get(), device->get()}) {
    ASSERT_TRUE(p->Add(1, 64).ok());
    ASSERT_TRUE(p->Add(2, 64).ok());
    ASSERT_TRUE(p->Reserve(1, 40).ok());
    ASSERT_TRUE(p->Reserve(2, 17).ok());
    ASSERT_TRUE(p->MarkWritten(1, 40).ok());
    ASSERT_TRUE(p->Remove(1).ok());
    ASSERT_TRUE(p->Add(3, 64).ok());
    ASSERT_TRUE(p->Reserve(3, 33).ok());
  }
  KvPool& h = **host;
  KvPool& d = **device;
  for (SequenceId id : {2, 3}) {
    EXPECT_EQ(
        std::vector<int32_t>(d.PageTable(id).begin(), d.PageTable(id).end()),
        std::vector<int32_t>(h.PageTable(id).begin(), h.PageTable(id).end()));
    EXPECT_EQ(d.StateSlot(id), h.StateSlot(id));
    EXPECT_GE(d.StateSlot(id), 0);
    EXPECT_EQ(d.LinearState(id), nullptr);
    EXPECT_NE(h.LinearState(id), nullptr);
  }
  const KvPoolStats hs = h.Stats(), ds = d.Stats();
  EXPECT_EQ(ds.free_pages, hs.free_pages);
  EXPECT_EQ(ds.used_tokens, hs.used_tokens);
  EXPECT_EQ(ds.used_bytes, hs.used_bytes);
  EXPECT_EQ(ds.linear_slots_used, 2);
  EXPECT_EQ(d.ResidentBytes(), 0);
}

TEST(KvPoolTest, LinearStateSlotsPerSequence) {
  KvModelShape shape = SmallShape();
  shape.num_linear_layers = 2;
  shape.conv_state_floats = 100;
  shape.recurrent_state_floats = 924;  // 2 * 1024 * 4 = 8 KiB per sequence
  absl::StatusOr<KvGeometry> g =
      ComputeKvGeometry(shape, {.bytes = 1 << 20}, 16, 3, nullptr);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<std::unique_ptr<KvPool>> pool = KvPool::Create(*g);
  ASSERT_TRUE(pool.ok()) << pool.status();
  KvPool& p = **pool;
  ASSERT_TRUE(p.Add(1, 16).ok());
  ASSERT_TRUE(p.Add(2, 16).ok());
  float* a = p.LinearState(1);
  float* b = p.LinearState(2);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_GE(std::abs(a - b), 2048);  // disjoint slots
  a[0] = 5.0f;
  a[2047] = 6.0f;
  EXPECT_EQ(p.Stats().linear_slots_used, 2);
  ASSERT_TRUE(p.Remove(1).ok());
  ASSERT_TRUE(p.Add(3, 16).ok());
  float* c = p.LinearState(3);
  EXPECT_EQ(c, a);  // slot reused, state zeroed
  EXPECT_EQ(c[0], 0.0f);
  EXPECT_EQ(c[2047], 0.0f);
  EXPECT_EQ(p.LinearState(99), nullptr);
  // Dense models have no state.
  std::unique_ptr<KvPool> dense = MakePool(4, 2);
  ASSERT_TRUE(dense->Add(1, 16).ok());
  EXPECT_EQ(dense->LinearState(1), nullptr);
}

}  // namespace
}  // namespace pdserve
