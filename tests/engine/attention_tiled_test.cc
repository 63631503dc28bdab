// The tiled attention over 16- and 8-bit KV caches: every SIMD level the CPU
// has is bitwise equal to the scalar reference (AttendTiledReference) for
// every KvDType, page size, head size and group; the split over the context
// (partial records + combine) is bitwise equal to one pass; and the result
// is close to exact softmax attention in double over the same stored keys.
// KvStorage's dtypes round-trip within their precision.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/kv/kv_storage.h"
#include "engine/model/attention.h"
#include "engine/model/attention_tiled.h"
#include "gtest/gtest.h"
#include "kernels/dtype.h"

namespace pdserve {
namespace {

struct Shape {
  KvDType dtype;
  int64_t page_size;
  int64_t head_dim;
  int64_t kv_heads;
  int64_t group;
  int64_t start_pos;  // keys already cached before the block's rows
  int64_t rows;
};

std::string Name(const Shape& s) {
  return std::string(KvDTypeName(s.dtype)) + " ps" +
         std::to_string(s.page_size) + " hd" + std::to_string(s.head_dim) +
         " g" + std::to_string(s.group) + " start" +
         std::to_string(s.start_pos) + " rows" + std::to_string(s.rows);
}

// A KV cache holding start_pos + rows random positions (pages in a shuffled
// order), random queries, and an AttentionBlock over them.
class Fixture {
 public:
  explicit Fixture(const Shape& s, uint32_t seed = 7) : s_(s) {
    const int64_t n = s.start_pos + s.rows;
    const int64_t pages = (n + s.page_size - 1) / s.page_size;
    const int64_t kv_dim = s.kv_heads * s.head_dim;
    kv_ = std::make_unique<KvStorage>(2, kv_dim, s.page_size, pages + 1,
                                      s.dtype, s.head_dim);
    table_.resize(pages);
    std::iota(table_.begin(), table_.end(), 1);  // page 0 unused
    std::mt19937 rng(seed);
    std::shuffle(table_.begin(), table_.end(), rng);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> k(kv_dim), v(kv_dim);
    for (int64_t pos = 0; pos < n; ++pos) {
      for (int64_t i = 0; i < kv_dim; ++i) {
        k[i] = 2.0f * normal(rng);  // spread scores: a peaked softmax too
        v[i] = normal(rng);
      }
      kv_->Write(table_[pos / s.page_size], 1, pos % s.page_size, k.data(),
                 v.data());
    }
    q_stride_ = s.kv_heads * s.group * s.head_dim;
    q_.resize(s.rows * q_stride_);
    for (float& x : q_) x = normal(rng);
  }

  AttentionBlock Block(int64_t kv_head, float* out) const {
    AttentionBlock b;
    b.kv = kv_.get();
    b.layer = 1;
    b.page_table = table_;
    b.start_pos = s_.start_pos;
    b.row_begin = 0;
    b.row_end = s_.rows;
    b.kv_head = kv_head;
    b.group = s_.group;
    b.head_dim = s_.head_dim;
    b.q = q_.data();
    b.q_stride = q_stride_;
    b.out = out;
    return b;
  }
  int64_t out_floats() const { return s_.rows * q_stride_; }
  const KvStorage& kv() const { return *kv_; }
  const std::vector<int32_t>& table() const { return table_; }
  const std::vector<float>& q() const { return q_; }

 private:
  Shape s_;
  std::unique_ptr<KvStorage> kv_;
  std::vector<int32_t> table_;
  std::vector<float> q_;
  int64_t q_stride_ = 0;
};

const std::vector<Shape>& Shapes() {
  static const auto* shapes = new std::vector<Shape>{
      {KvDType::kBF16, 16, 64, 2, 3, 0, 37},
      {KvDType::kBF16, 16, 64, 3, 3, 2100, 1},     // decode, 3 segments
      {KvDType::kBF16, 32, 128, 2, 2, 1000, 40},   // rows across a segment
      {KvDType::kBF16, 4, 64, 1, 2, 50, 5},        // pages of 4: gathers
      {KvDType::kF16, 16, 64, 2, 3, 1030, 3},
      {KvDType::kF16, 16, 128, 1, 4, 300, 17},
      {KvDType::kF16, 8, 32, 2, 1, 70, 9},
      {KvDType::kQ8_0, 16, 64, 3, 3, 1500, 2},
      {KvDType::kQ8_0, 16, 128, 2, 2, 40, 20},
      {KvDType::kQ8_0, 48, 32, 1, 5, 200, 4},
      {KvDType::kF32, 16, 64, 2, 3, 1100, 2},
      {KvDType::kF32, 16, 48, 1, 2, 30, 7},       // hd 48: 3 vectors
      {KvDType::kBF16, 16, 24, 2, 2, 30, 7},      // hd 24: the reference
  };
  return *shapes;
}

const char* const kIsas[] = {"avx512bf16", "avx512", "avx2", "generic"};

TEST(AttentionTiledTest, EveryIsaIsBitwiseTheScalarReference) {
  int levels_run = 0;
  for (const char* isa : kIsas) {
    const attn_internal::TiledKernels* k = attn_internal::KernelsFor(isa);
    if (k == nullptr) continue;
    ++levels_run;
    for (const Shape& s : Shapes()) {
      if (!AttendTiledVectorized(s.head_dim)) continue;
      Fixture f(s);
      std::vector<float> want(f.out_floats(), -1.0f),
          got(f.out_floats(), -2.0f);
      std::vector<float> scratch(AttendTiledScratchFloats(s.head_dim, s.group));
      const int64_t heads = f.kv().kv_dim() / s.head_dim;
      for (int64_t h = 0; h < heads; ++h) {
        AttendTiledReference(f.Block(h, want.data()));
        k->attend(f.Block(h, got.data()), 0, 0, nullptr, 0, scratch.data());
      }
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(),
                               want.size() * sizeof(float)))
          << isa << " " << Name(s);
    }
  }
  EXPECT_GE(levels_run, 1);
  std::printf("levels run: %d (selected %s)\n", levels_run, AttendTiledIsa());
}

TEST(AttentionTiledTest, SplitOverTheContextIsBitwiseOnePass) {
  for (const Shape& s : Shapes()) {
    if (!AttendTiledVectorized(s.head_dim)) continue;
    Fixture f(s);
    const int64_t heads = f.kv().kv_dim() / s.head_dim;
    std::vector<float> one(f.out_floats(), -1.0f), split(f.out_floats(), -2.0f);
    std::vector<float> scratch(AttendTiledScratchFloats(s.head_dim, s.group));
    const int64_t segs = AttnSegments(s.start_pos + s.rows);
    const int64_t rec = AttnPartialFloats(s.head_dim);
    std::vector<float> partials(s.rows * s.group * segs * rec, NAN);
    for (int64_t h = 0; h < heads; ++h) {
      const AttentionBlock b1 = f.Block(h, one.data());
      AttendTiled(b1, scratch.data());
      const AttentionBlock b2 = f.Block(h, split.data());
      // Segments in reverse order, one call each, as threads might.
      for (int64_t sg = segs - 1; sg >= 0; --sg) {
        AttendTiledPartial(b2, sg, sg + 1, partials.data(), segs,
                           scratch.data());
      }
      CombineAttnPartials(b2, partials.data(), segs);
    }
    ASSERT_EQ(0,
              std::memcmp(one.data(), split.data(), one.size() * sizeof(float)))
        << Name(s);
  }
}

// A block of several kv heads (decode reads each key block for all of them
// in turn) writes bitwise what one block per head writes, whole and split
// over the context, for every dtype (the others loop over the heads).
TEST(AttentionTiledTest, SeveralKvHeadsInOneBlockEqualOneBlockEach) {
  std::vector<Shape> shapes = Shapes();
  shapes.push_back({KvDType::kBF16, 16, 64, 20, 1, 1500, 1});  // > 16 heads
  shapes.push_back({KvDType::kBF16, 16, 128, 4, 2, 2100, 3});
  for (const Shape& s : shapes) {
    Fixture f(s);
    const int64_t heads = f.kv().kv_dim() / s.head_dim;
    std::vector<float> each(f.out_floats(), -1.0f), all(f.out_floats(), -2.0f);
    std::vector<float> scratch(AttentionScratchFloats(
        s.start_pos + s.rows, s.head_dim, s.dtype, s.group));
    for (int64_t h = 0; h < heads; ++h) {
      AttendBlock(f.Block(h, each.data()), scratch.data());
    }
    AttentionBlock b = f.Block(0, all.data());
    b.kv_heads = heads;
    AttendBlock(b, scratch.data());
    ASSERT_EQ(0, std::memcmp(each.data(), all.data(),
                             each.size() * sizeof(float)))
        << Name(s);
    if (!AttendTiledVectorized(s.head_dim) || s.dtype == KvDType::kF32) {
      continue;
    }
    // Split: heads [1, heads) in one block, segments in reverse order.
    std::vector<float> split(f.out_floats(), -3.0f);
    const int64_t segs = AttnSegments(s.start_pos + s.rows);
    const int64_t rec = AttnPartialFloats(s.head_dim);
    const int64_t per_head = s.rows * s.group * segs * rec;
    std::vector<float> partials(heads * per_head, NAN);
    AttentionBlock first = f.Block(0, split.data());
    AttentionBlock rest = f.Block(1, split.data());
    rest.kv_heads = heads - 1;
    for (int64_t sg = segs - 1; sg >= 0; --sg) {
      AttendTiledPartial(first, sg, sg + 1, partials.data(), segs,
                         scratch.data());
      if (heads > 1) {
        AttendTiledPartial(rest, sg, sg + 1, partials.data() + per_head,
                           segs, scratch.data());
      }
    }
    for (int64_t h = 0; h < heads; ++h) {
      CombineAttnPartials(f.Block(h, split.data()),
                          partials.data() + h * per_head, segs);
    }
    ASSERT_EQ(0, std::memcmp(each.data(), split.data(),
                             each.size() * sizeof(float)))
        << "split " << Name(s);
  }
}

TEST(AttentionTiledTest, RowsComputedAloneEqualTheBlock) {
  // Batch invariance: a query's result does not depend on the rows it is
  // computed with.
  const Shape s{KvDType::kBF16, 16, 64, 2, 3, 1020, 24};
  Fixture f(s);
  std::vector<float> block(f.out_floats()), alone(f.out_floats());
  std::vector<float> scratch(AttendTiledScratchFloats(s.head_dim, s.group));
  for (int64_t h = 0; h < 2; ++h) {
    AttendBlock(f.Block(h, block.data()), scratch.data());
    for (int64_t r = 0; r < s.rows; ++r) {
      AttentionBlock b = f.Block(h, alone.data());
      b.row_begin = r;
      b.row_end = r + 1;
      AttendBlock(b, scratch.data());
    }
  }
  EXPECT_EQ(0, std::memcmp(block.data(), alone.data(),
                           block.size() * sizeof(float)));
}

TEST(AttentionTiledTest, CloseToExactSoftmaxOverTheStoredKeys) {
  for (const Shape& s : Shapes()) {
    Fixture f(s);
    const int64_t heads = f.kv().kv_dim() / s.head_dim;
    std::vector<float> got(f.out_floats());
    std::vector<float> scratch(AttendTiledScratchFloats(s.head_dim, s.group));
    double worst = 0;
    for (int64_t h = 0; h < heads; ++h) {
      const AttentionBlock b = f.Block(h, got.data());
      AttendTiled(b, scratch.data());
      std::vector<float> key(s.head_dim), val(s.head_dim);
      for (int64_t r = 0; r < s.rows; ++r) {
        for (int64_t g = 0; g < s.group; ++g) {
          const int64_t off = r * b.q_stride + (h * s.group + g) * s.head_dim;
          const int64_t n = s.start_pos + r + 1;
          std::vector<double> score(n), out(s.head_dim, 0.0);
          double mx = -1e300, sum = 0;
          for (int64_t j = 0; j < n; ++j) {
            f.kv().ReadKey(f.table()[j / s.page_size], 1, j % s.page_size,
                           key.data(), h * s.head_dim, s.head_dim);
            double dot = 0;
            for (int64_t d = 0; d < s.head_dim; ++d) {
              dot += static_cast<double>(f.q()[off + d]) * key[d];
            }
            score[j] = dot / std::sqrt(static_cast<double>(s.head_dim));
            mx = std::max(mx, score[j]);
          }
          for (int64_t j = 0; j < n; ++j) {
            const double p = std::exp(score[j] - mx);
            sum += p;
            f.kv().ReadValue(f.table()[j / s.page_size], 1, j % s.page_size,
                             val.data(), h * s.head_dim, s.head_dim);
            for (int64_t d = 0; d < s.head_dim; ++d) out[d] += p * val[d];
          }
          for (int64_t d = 0; d < s.head_dim; ++d) {
            worst = std::max(worst, std::fabs(out[d] / sum - got[off + d]));
          }
        }
      }
    }
    // f32, f16, q8_0 multiply in f32; bf16 rounds q and p to bf16 too.
    const double tol = s.dtype == KvDType::kBF16 ? 2e-2 : 2e-5;  // bf16: 0.0085 measured
    EXPECT_LT(worst, tol) << Name(s);
    std::printf("%s: largest difference from exact %.3g\n", Name(s).c_str(),
                worst);
  }
}

TEST(KvStorageDTypeTest, RoundTripsWithinTheTypesPrecision) {
  const int64_t kv_dim = 128, ps = 16;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> k(kv_dim), v(kv_dim), rk(kv_dim), rv(kv_dim);
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  for (KvDType d : {KvDType::kF32, KvDType::kF16, KvDType::kBF16,
                    KvDType::kQ8_0}) {
    KvStorage kv(3, kv_dim, ps, 4, d, 64);
    EXPECT_EQ(kv.bytes_per_token_per_layer(), 2 * KvRowBytes(d, kv_dim));
    EXPECT_EQ(kv.page_stride_bytes() % OsPageBytes(), 0);
    kv.Write(2, 1, 5, k.data(), v.data());
    kv.ReadKey(2, 1, 5, rk.data());
    kv.ReadValue(2, 1, 5, rv.data());
    for (int64_t i = 0; i < kv_dim; ++i) {
      float amax = 0;  // of the element's Q8_0 block
      for (int64_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) {
        amax = std::max(amax, std::fabs(k[j]));
      }
      const float tol = d == KvDType::kF32    ? 0.0f
                        : d == KvDType::kF16  ? std::fabs(k[i]) / 2048
                        : d == KvDType::kBF16 ? std::fabs(k[i]) / 256
                                              : amax / 254 * 1.01f;
      EXPECT_LE(std::fabs(rk[i] - k[i]), tol) << KvDTypeName(d) << " " << i;
    }
    // Other slots and layers are untouched (zeros).
    kv.ReadKey(2, 1, 4, rk.data());
    kv.ReadValue(2, 0, 5, rv.data());
    for (int64_t i = 0; i < kv_dim; ++i) {
      EXPECT_EQ(rk[i], 0.0f);
      EXPECT_EQ(rv[i], 0.0f);
    }
  }
  // bf16 is stored in dot-product pairs: key element i of slot s at
  // [i / 2][s][i % 2], value element i = h * 64 + d at [h][s / 2][d][s % 2]
  // (each head's values in the page contiguous).
  KvStorage kv(1, kv_dim, ps, 1, KvDType::kBF16, 64);
  kv.Write(0, 0, 5, k.data(), v.data());
  const auto* keys = reinterpret_cast<const uint16_t*>(kv.key_block(0, 0));
  const auto* vals = reinterpret_cast<const uint16_t*>(kv.value_block(0, 0));
  EXPECT_EQ(keys[(3 * ps + 5) * 2 + 1], F32ToBF16(k[7]));
  EXPECT_EQ(vals[(2 * 64 + 7) * 2 + 1], F32ToBF16(v[7]));
  EXPECT_EQ(vals[(((1 * ps / 2) + 2) * 64 + 3) * 2 + 1], F32ToBF16(v[64 + 3]));
  EXPECT_EQ(keys[((32 + 1) * ps + 5) * 2 + 1], F32ToBF16(k[64 + 3]));
  // f16 keys are transposed: element i of slot 5 at [i][slot].
  KvStorage kv16(1, kv_dim, ps, 1, KvDType::kF16, 64);
  kv16.Write(0, 0, 5, k.data(), v.data());
  EXPECT_EQ(reinterpret_cast<const uint16_t*>(kv16.key_block(0, 0))[7 * ps + 5],
            F32ToF16(k[7]));
}

// Huge pages are advice on the mapping: the same bytes round-trip.
TEST(KvStorageDTypeTest, HugePageStorageRoundTrips) {
  auto kv = KvStorage::Create(4, 128, 16, 64, KvDType::kBF16, 64,
                              /*huge_pages=*/true);
  ASSERT_TRUE(kv.ok()) << kv.status();
  std::vector<float> k(128), v(128), rk(128), rv(128);
  for (int i = 0; i < 128; ++i) {
    k[i] = 0.25f * i;  // exact in bf16
    v[i] = -0.5f * i;
  }
  (*kv)->Write(63, 3, 15, k.data(), v.data());
  (*kv)->ReadKey(63, 3, 15, rk.data());
  (*kv)->ReadValue(63, 3, 15, rv.data());
  EXPECT_EQ(rk, k);
  EXPECT_EQ(rv, v);
}

TEST(KvStorageDTypeTest, BadShapesAreRefusedWithTheNumbers) {
  auto q8 = KvStorage::Create(2, 48, 16, 4, KvDType::kQ8_0, 24);
  ASSERT_FALSE(q8.ok());
  EXPECT_NE(q8.status().message().find("24"), std::string::npos)
      << q8.status();
  auto uneven = KvStorage::Create(2, 100, 16, 4, KvDType::kBF16, 64);
  EXPECT_FALSE(uneven.ok());
  auto odd_pages = KvStorage::Create(2, 128, 5, 4, KvDType::kBF16, 64);
  ASSERT_FALSE(odd_pages.ok());
  EXPECT_NE(odd_pages.status().message().find("even page size"),
            std::string::npos);
  auto parsed = ParseKvDType("bf8");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("bf8"), std::string::npos);
  EXPECT_EQ(*ParseKvDType("q8_0"), KvDType::kQ8_0);
}

}  // namespace
}  // namespace pdserve
