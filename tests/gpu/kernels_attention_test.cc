// CUDA paged attention (StoreKv, PrefillAttention, DecodeAttention) against
// the CPU attention (engine/model/attention.h AttendBlock) over the same
// KvStorage contents: the device cache is a byte copy of the host storage
// (same layout, same page ids). Sequences have different lengths and start
// positions (not multiples of the page size) and shuffled page tables; GQA
// ratios 1, 3, 4, 8; head_dim 64, 128, 256.
// Both cache types: f32, and bf16 (the host reference then holds the same
// bf16-rounded keys/values, so the comparison isolates the kernels).
// Tolerances: StoreKv bitwise; attention outputs 2e-5 absolute (values are
// convex combinations of V entries in [-1, 1]; f32 math throughout, the
// device's expf and summation order differ from the CPU's).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_kernels.h"
#include "tests/gpu/kernels_attention_case.h"
#include "tests/gpu/kernels_test_util.h"

namespace pdserve::cuda {
namespace {

using testing::AttentionCase;
using testing::DeviceBuffer;
using testing::kLayer;
using testing::SeqSpec;

struct Geometry {
  int kv_heads, group, head_dim;
};

TEST(CudaAttentionTest, StoreKvWritesTheSameBytesAsTheHost) {
  PDSERVE_REQUIRE_GPU();
  for (KvType type : {KvType::kF32, KvType::kBF16}) {
    SCOPED_TRACE(static_cast<int>(type));
    AttentionCase c(2, 4, 64, {{0, 37}, {21, 50}, {100, 1}, {5, 67}}, 1.0f, 1,
                    type);
    c.Upload();
    CUDA_ASSERT_OK(c.DeviceStore());
    c.HostStore();
    EXPECT_TRUE(c.DeviceCacheEqualsHost());
  }
}

TEST(CudaAttentionTest, PrefillMatchesCpu) {
  PDSERVE_REQUIRE_GPU();
  const Geometry geos[] = {{2, 1, 128}, {2, 4, 128}, {1, 8, 128},
                           {2, 4, 64},  {3, 3, 64},  {1, 2, 256}};
  uint32_t seed = 10;
  for (const Geometry& g : geos) {
    for (float q_scale : {1.0f, 6.0f}) {  // flat and peaky softmax
      // f32 cache with the flat softmax, bf16 with the peaky one.
      const KvType type = q_scale > 1.0f ? KvType::kBF16 : KvType::kF32;
      SCOPED_TRACE(::testing::Message()
                   << "kv_heads " << g.kv_heads << " group " << g.group
                   << " head_dim " << g.head_dim << " q_scale " << q_scale
                   << " kv type " << static_cast<int>(type));
      AttentionCase c(g.kv_heads, g.group, g.head_dim,
                      {{0, 37}, {21, 50}, {100, 1}, {5, 67}, {16, 16}}, q_scale,
                      seed++, type);
      c.Upload();
      CUDA_ASSERT_OK(c.DeviceStore());
      c.HostStore();
      CUDA_ASSERT_OK(PrefillAttention(c.cache_, kLayer, c.batch_, c.shape_,
                                      c.d_q_.get(), c.q_stride_, c.d_out_.get(),
                                      c.q_stride_, nullptr));
      c.ExpectOutput(c.CpuAttention());
    }
  }
}

TEST(CudaAttentionTest, DecodeMatchesCpuWithAndWithoutSplits) {
  PDSERVE_REQUIRE_GPU();
  const Geometry geos[] = {{2, 1, 128}, {2, 4, 128}, {1, 8, 128},
                           {2, 4, 64},  {2, 3, 64},  {1, 4, 256}};
  // Long contexts are split across blocks (combine kernel); short ones
  // (<= 256 keys) run in one split.
  const std::vector<std::vector<SeqSpec>> batches = {
      {{0, 1}, {15, 1}, {16, 1}, {300, 1}, {2999, 1}},
      {{0, 1}, {15, 1}, {16, 1}, {200, 1}}};
  uint32_t seed = 100;
  for (const Geometry& g : geos) {
    for (const auto& seqs : batches) {
      // Each geometry and batch with both cache types.
      for (KvType type : {KvType::kF32, KvType::kBF16}) {
        SCOPED_TRACE(::testing::Message()
                     << "kv_heads " << g.kv_heads << " group " << g.group
                     << " head_dim " << g.head_dim << " seqs " << seqs.size()
                     << " kv type " << static_cast<int>(type));
        AttentionCase c(g.kv_heads, g.group, g.head_dim, seqs, 3.0f, seed++,
                        type);
        c.Upload();
        CUDA_ASSERT_OK(c.DeviceStore());
        c.HostStore();
        const int64_t ws_bytes = DecodeAttentionWorkspaceBytes(
            c.shape_, c.batch_.num_seqs, c.batch_.max_kv_len);
        if (seqs.size() == 5) {
          EXPECT_GT(ws_bytes, 0) << "expected splits";
        }
        DeviceBuffer<uint8_t> ws(ws_bytes);
        CUDA_ASSERT_OK(DecodeAttention(
            c.cache_, kLayer, c.batch_, c.shape_, c.d_q_.get(), c.q_stride_,
            c.d_out_.get(), c.q_stride_, ws.get(), ws_bytes, nullptr));
        const std::vector<float> want = c.CpuAttention();
        c.ExpectOutput(want);
        // The prefill kernel agrees on the same one-row batch.
        CUDA_ASSERT_OK(PrefillAttention(c.cache_, kLayer, c.batch_, c.shape_,
                                        c.d_q_.get(), c.q_stride_,
                                        c.d_out_.get(), c.q_stride_, nullptr));
        c.ExpectOutput(want);
      }
    }
  }
}

TEST(CudaAttentionTest, StoreKvSkipsRowsWithoutAPage) {
  PDSERVE_REQUIRE_GPU();
  // Sequence 1's last rows reach page index 2, but its table is cut to 2
  // pages below: those rows must not be written anywhere.
  AttentionCase c(1, 4, 64, {{3, 10}, {20, 14}}, 1.0f, 7);
  c.Upload();
  const std::vector<float> before = c.d_cache_.Download();
  const std::vector<int32_t> cut_page_start = {0, 1, 3};  // 1 + 2 pages
  DeviceBuffer<int32_t> d_ps(cut_page_start);
  AttentionBatch b = c.batch_;
  b.page_start = d_ps.get();
  constexpr int64_t kKvDim = 64;  // 1 kv head of 64
  CUDA_ASSERT_OK(StoreKv(c.cache_, kLayer, b, c.d_k_.get(), kKvDim,
                         c.d_v_.get(), kKvDim, nullptr));
  const std::vector<float> after = c.d_cache_.Download();
  // Rows of positions 32..33 (page index 2) were dropped; everything else
  // written: count changed floats against the expectation.
  int64_t changed = 0;
  for (size_t i = 0; i < after.size(); ++i) changed += after[i] != before[i];
  const int64_t written_rows = 10 + (32 - 20);
  EXPECT_LE(changed, written_rows * 2 * kKvDim);
  EXPECT_GE(changed, written_rows * 2 * kKvDim - 4);  // equal by chance
}

TEST(CudaAttentionTest, RejectsUnsupportedHeadDim) {
  float* fake = testing::FakeFloats();
  DeviceKvCache kv{fake, 1, 2 * 96, 16, 4, 2 * 16 * 2 * 96};
  const AttentionBatch b = testing::FakeBatch();
  AttentionShape s{8, 2, 96, 0.0f};
  EXPECT_EQ(PrefillAttention(kv, 0, b, s, fake, 768, fake, 768, nullptr),
            cudaErrorInvalidValue);
  EXPECT_THAT(LastErrorDetail(), ::testing::HasSubstr("head_dim 96"));
  EXPECT_EQ(
      DecodeAttention(kv, 0, b, s, fake, 768, fake, 768, nullptr, 0, nullptr),
      cudaErrorInvalidValue);
  EXPECT_EQ(DecodeAttentionWorkspaceBytes(AttentionShape{8, 3, 128, 0}, 1, 9),
            0);  // 8 heads not a multiple of 3 kv heads
  EXPECT_EQ(StoreKv(kv, 1, b, fake, 192, fake, 192, nullptr),
            cudaErrorInvalidValue);  // layer 1 of 1
}

}  // namespace
}  // namespace pdserve::cuda
