// FlashPrefillAttention (bf16 tensor cores, online softmax) against the CPU
// attention (engine/model/attention.h AttendBlock) on the same paged cache,
// and the tensor-core tile it is built from (MmaBf16Tile) against a host
// product.
//   - MmaBf16Tile: both B layouts, the mma instruction and the shuffle form,
//     equal the exact product of the bf16 inputs: on a device this pins the
//     fragment layout of kernels/cuda/src/mma.cuh to the hardware; on the
//     CPU emulator (emu_kernels_flash_attention_test) both forms are the
//     shuffle form, and the kernel below runs exactly as on a device except
//     for the mma instruction itself.
//   - Prefill: GQA ratios 1..8, head_dim 64/128/256 and the padded ones (8,
//     96), sequences at different start positions, shuffled pages, several
//     key tiles; queries rounded to bf16 in the reference too, so with a
//     bf16 cache the only rounding left is the probabilities' (bf16, at most
//     2^-9 relative): 3e-3 absolute on outputs in [-1, 1]. With an f32 cache
//     the kernel also rounds keys and values: 1.5e-2 at a flat softmax.
// Every device test skips without a CUDA device.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/dtype.h"
#include "tests/gpu/kernels_attention_case.h"
#include "tests/gpu/kernels_test_util.h"

namespace pdserve::cuda {
namespace {

using testing::AttentionCase;
using testing::DeviceBuffer;
using testing::kLayer;
using testing::SeqSpec;

TEST(CudaFlashAttentionTest, MmaTileEqualsHostProduct) {
  PDSERVE_REQUIRE_GPU();
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<uint16_t> a(16 * 16), b(16 * 8);
  for (uint16_t& x : a) x = F32ToBF16(d(rng));
  for (uint16_t& x : b) x = F32ToBF16(d(rng));
  std::vector<float> want(16 * 8, 0.0f);
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 8; ++n) {
      double s = 0.0;
      for (int k = 0; k < 16; ++k) {
        s += static_cast<double>(BF16ToF32(a[m * 16 + k])) *
             BF16ToF32(b[k * 8 + n]);
      }
      want[m * 8 + n] = static_cast<float>(s);
    }
  }
  DeviceBuffer<uint16_t> da(a), db(b);
  DeviceBuffer<float> dc(256);
  for (bool shuffle : {false, true}) {
    CUDA_ASSERT_OK(MmaBf16Tile(da.get(), db.get(), dc.get(), shuffle, nullptr));
    const std::vector<float> got = dc.Download();
    for (int f = 0; f < 2; ++f) {
      for (int i = 0; i < 128; ++i) {
        // Products of bf16 are exact in f32; only the sum order differs.
        ASSERT_NEAR(got[f * 128 + i], want[i],
                    1e-5f * (1.0f + std::fabs(want[i])))
            << (shuffle ? "shuffle form, " : "mma, ")
            << (f == 0 ? "k-major B" : "n-major B") << ", C[" << i / 8 << "]["
            << i % 8 << "]";
      }
    }
  }
}

struct FlashGeometry {
  int kv_heads, group, head_dim;
};

void ExpectFlashMatchesCpu(const FlashGeometry& g,
                           const std::vector<SeqSpec>& seqs, float q_scale,
                           KvType type, uint32_t seed, float tol) {
  SCOPED_TRACE(::testing::Message()
               << "kv_heads " << g.kv_heads << " group " << g.group
               << " head_dim " << g.head_dim << " q_scale " << q_scale
               << " kv type " << static_cast<int>(type));
  AttentionCase c(g.kv_heads, g.group, g.head_dim, seqs, q_scale, seed, type);
  c.RoundQueriesToBf16();
  c.Upload();
  CUDA_ASSERT_OK(c.DeviceStore());
  c.HostStore();
  CUDA_ASSERT_OK(FlashPrefillAttention(c.cache_, kLayer, c.batch_, c.shape_,
                                       c.d_q_.get(), c.q_stride_,
                                       c.d_out_.get(), c.q_stride_, nullptr));
  c.ExpectOutput(c.CpuAttention(), tol);
}

TEST(CudaFlashAttentionTest, PrefillMatchesCpuOnABf16Cache) {
  PDSERVE_REQUIRE_GPU();
  const FlashGeometry geos[] = {{2, 1, 128}, {2, 4, 128}, {1, 8, 128},
                                {2, 4, 64},  {3, 3, 64},  {1, 2, 256},
                                {2, 2, 96},  {4, 2, 8}};
  uint32_t seed = 40;
  for (const FlashGeometry& g : geos) {
    for (float q_scale : {1.0f, 6.0f}) {  // flat and peaky softmax
      ExpectFlashMatchesCpu(g, {{0, 37}, {21, 50}, {100, 1}, {5, 67}, {16, 16}},
                            q_scale, KvType::kBF16, seed++, 3e-3f);
    }
  }
}

TEST(CudaFlashAttentionTest, PrefillMatchesCpuOnAnF32Cache) {
  PDSERVE_REQUIRE_GPU();
  uint32_t seed = 60;
  for (const FlashGeometry& g :
       {FlashGeometry{2, 4, 128}, FlashGeometry{1, 2, 64}}) {
    ExpectFlashMatchesCpu(g, {{0, 37}, {21, 50}, {100, 1}}, 1.0f, KvType::kF32,
                          seed++, 1.5e-2f);
  }
}

// A chunk continuing a long cached context: many key tiles (the diagonal
// ones partly masked, warps skipping tiles past their rows), several query
// blocks, a page table that ends exactly at the last position.
TEST(CudaFlashAttentionTest, LongContextChunkMatchesCpu) {
  PDSERVE_REQUIRE_GPU();
  ExpectFlashMatchesCpu({1, 4, 128}, {{300, 90}, {0, 130}}, 4.0f, KvType::kBF16,
                        77, 3e-3f);
  ExpectFlashMatchesCpu({2, 1, 256}, {{250, 70}}, 4.0f, KvType::kBF16, 78,
                        3e-3f);
}

TEST(CudaFlashAttentionTest, RejectsUnsupportedShapes) {
  float* fake = testing::FakeFloats();
  DeviceKvCache kv{fake, 1, 2 * 320, 16, 4, 2 * 16 * 2 * 320};
  const AttentionBatch b = testing::FakeBatch();
  AttentionShape s{8, 2, 320, 0.0f};
  EXPECT_EQ(FlashPrefillAttention(kv, 0, b, s, fake, 2560, fake, 2560, nullptr),
            cudaErrorInvalidValue);
  EXPECT_THAT(LastErrorDetail(), ::testing::HasSubstr("head_dim 320"));
  // A bf16 cache whose page stride is not a multiple of 8 elements.
  DeviceKvCache kv16{fake,         1, 2 * 64, 16, 4, 2 * 16 * 2 * 64 + 4,
                     KvType::kBF16};
  AttentionShape s64{4, 2, 64, 0.0f};
  EXPECT_EQ(
      FlashPrefillAttention(kv16, 0, b, s64, fake, 256, fake, 256, nullptr),
      cudaErrorInvalidValue);
  EXPECT_EQ(MmaBf16Tile(nullptr, nullptr, nullptr, false, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace pdserve::cuda
