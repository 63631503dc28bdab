// CUDA matrix products against kernels' MatMulReference (dequantize + double
// accumulation). Tolerances, relative to S = sum_i |w_i x_i| of each output:
//   MatVec, any type: 2e-5 * S (exact dequantization, f32 accumulation over
//     at most cols / 32 + 5 rounding steps per lane and warp tree);
//   CublasGemm f32 (no TF32): 2e-5 * S;
//   CublasGemm bf16 / f16: 1e-4 * S against the reference on activations
//     rounded to bf16 / f16 (tensor cores accumulate in f32 in their own
//     order), and 1e-2 * S against the unrounded f32 product;
//   ConvertF32ToHalf: bitwise F32ToBF16 / F32ToF16; DequantizeToHalf: the
//     reference value rounded to the half type, within one half ulp step.
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/dtype.h"
#include "kernels/matmul.h"
#include "tests/gpu/kernels_test_util.h"

namespace pdserve::cuda {
namespace {

using testing::DeviceBuffer;
using testing::RandomFloats;

struct HostMatrix {
  DType type;
  int64_t rows, cols, row_bytes;
  std::vector<uint8_t> bytes;
  WeightView view() const {
    return WeightView{type, rows, cols, row_bytes, bytes.data()};
  }
};

// Random matrix; row_bytes padded by `pad` bytes (keeps the type alignment).
HostMatrix MakeMatrix(DType t, int64_t rows, int64_t cols, int64_t pad,
                      std::mt19937& rng) {
  HostMatrix m{t, rows, cols, RowBytes(t, cols).value() + pad, {}};
  m.bytes.assign(rows * m.row_bytes, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> v = RandomFloats(cols, rng);
    QuantizeRow(t, v.data(), m.bytes.data() + r * m.row_bytes, cols);
  }
  return m;
}

// sum_i |w[o][i] x[t][i]| per output, for the tolerances.
std::vector<double> AbsProducts(const HostMatrix& m, const float* x, int64_t xs,
                                int64_t n) {
  std::vector<double> s(n * m.rows, 0.0);
  std::vector<float> w(m.cols);
  for (int64_t o = 0; o < m.rows; ++o) {
    DequantizeRow(m.type, m.bytes.data() + o * m.row_bytes, w.data(), m.cols);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < m.cols; ++i) {
        s[t * m.rows + o] +=
            std::fabs(static_cast<double>(w[i]) * x[t * xs + i]);
      }
    }
  }
  return s;
}

void ExpectClose(const std::vector<float>& got, int64_t ys,
                 const std::vector<float>& want, int64_t rows, int64_t n,
                 const std::vector<double>& scale, double rel) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t o = 0; o < rows; ++o) {
      ASSERT_NEAR(got[t * ys + o], want[t * rows + o],
                  rel * scale[t * rows + o] + 1e-6)
          << "token " << t << " row " << o;
    }
  }
}

const DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16,
                           DType::kQ8_0, DType::kQ4_0, DType::kQ4_1};

TEST(CudaMatVecTest, AllTypesAllTokenCountsMatchReference) {
  PDSERVE_REQUIRE_GPU();
  std::mt19937 rng(10);
  for (DType t : kAllTypes) {
    const bool quant = DTypeBlockValues(t) == 32;
    // Tails: rows not a multiple of 4, cols not a multiple of 8 (dense).
    for (int64_t cols : {int64_t{1024}, quant ? int64_t{96} : int64_t{1061}}) {
      for (int64_t pad : {int64_t{0}, int64_t{16}, int64_t{4}}) {
        SCOPED_TRACE(::testing::Message()
                     << DTypeName(t) << " cols " << cols << " pad " << pad);
        const int64_t rows = 67;
        const HostMatrix m = MakeMatrix(t, rows, cols, pad, rng);
        DeviceBuffer<uint8_t> d_w(m.bytes);
        const DeviceMatrix dm{static_cast<WType>(t), rows, cols, m.row_bytes,
                              d_w.get()};
        for (int64_t n = 1; n <= kMaxMatVecTokens; ++n) {
          // x_stride cols + 4 keeps 16-byte rows; cols + 1 takes the generic
          // path.
          const int64_t xs = n % 2 == 0 ? cols + 4 : cols + 1;
          const std::vector<float> x = RandomFloats(n * xs, rng);
          std::vector<float> want(n * rows);
          MatMulReference(m.view(), x.data(), xs, n, want.data(), rows);
          DeviceBuffer<float> d_x(x), d_y(n * (rows + 3));
          CUDA_ASSERT_OK(
              MatVec(dm, d_x.get(), xs, n, d_y.get(), rows + 3, nullptr));
          ExpectClose(d_y.Download(), rows + 3, want, rows, n,
                      AbsProducts(m, x.data(), xs, n), 2e-5);
        }
      }
    }
  }
}

TEST(CudaMatVecTest, RejectsTooManyTokens) {
  float* fake = reinterpret_cast<float*>(uintptr_t{256});
  const DeviceMatrix dm{WType::kBF16, 8, 64, 128, fake};
  EXPECT_EQ(MatVec(dm, fake, 64, 9, fake, 8, nullptr), cudaErrorInvalidValue);
  EXPECT_NE(std::string(LastErrorDetail()).find("9 tokens"), std::string::npos)
      << LastErrorDetail();
  const DeviceMatrix odd{WType::kF16, 8, 64, 127, fake};  // odd row_bytes
  EXPECT_EQ(MatVec(odd, fake, 64, 1, fake, 8, nullptr), cudaErrorInvalidValue);
}

TEST(CudaGemmTest, F32ExactAndHalfTypesMatchReference) {
  PDSERVE_REQUIRE_GPU();
  std::mt19937 rng(11);
  CublasGemm gemm;
  CUDA_ASSERT_OK(gemm.Init());
  // cols 202: the activation conversion's last group of 4 is a tail.
  const int64_t rows = 131, cols = 202, n = 37, xs = cols + 6, ys = rows + 5;
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(t));
    const HostMatrix m = MakeMatrix(t, rows, cols, 0, rng);
    DeviceBuffer<uint8_t> d_w(m.bytes);
    const DeviceMatrix dm{static_cast<WType>(t), rows, cols, m.row_bytes,
                          d_w.get()};
    const std::vector<float> x = RandomFloats(n * xs, rng);
    // Reference on the activations the device multiplies.
    std::vector<float> xr = x;
    for (float& v : xr) {
      if (t == DType::kBF16) v = BF16ToF32(F32ToBF16(v));
      if (t == DType::kF16) v = F16ToF32(F32ToF16(v));
    }
    std::vector<float> want(n * rows), want_exact(n * rows);
    MatMulReference(m.view(), xr.data(), xs, n, want.data(), rows);
    MatMulReference(m.view(), x.data(), xs, n, want_exact.data(), rows);
    const int64_t scratch_bytes = CublasGemm::ScratchBytes(dm.type, cols, n);
    EXPECT_EQ(scratch_bytes,
              t == DType::kF32 ? 0 : (cols * n * 2 + 15) / 16 * 16);
    DeviceBuffer<uint8_t> d_scratch(scratch_bytes + 16);
    DeviceBuffer<float> d_x(x), d_y(n * ys);
    CUDA_ASSERT_OK(gemm.Run(dm, d_x.get(), xs, n, d_y.get(), ys,
                            d_scratch.get(), scratch_bytes, nullptr));
    const std::vector<float> got = d_y.Download();
    const std::vector<double> scale = AbsProducts(m, x.data(), xs, n);
    ExpectClose(got, ys, want, rows, n, scale, t == DType::kF32 ? 2e-5 : 1e-4);
    ExpectClose(got, ys, want_exact, rows, n, scale, 1e-2);
  }
}

TEST(CudaGemmTest, QuantizedThroughDequantizeToHalf) {
  PDSERVE_REQUIRE_GPU();
  std::mt19937 rng(12);
  CublasGemm gemm;
  CUDA_ASSERT_OK(gemm.Init());
  const int64_t rows = 70, cols = 128, n = 20;
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    for (HalfType ht : {HalfType::kBF16, HalfType::kF16}) {
      SCOPED_TRACE(::testing::Message()
                   << DTypeName(t) << " -> " << static_cast<int>(ht));
      const HostMatrix m = MakeMatrix(t, rows, cols, 2, rng);
      DeviceBuffer<uint8_t> d_w(m.bytes);
      const DeviceMatrix dq{static_cast<WType>(t), rows, cols, m.row_bytes,
                            d_w.get()};
      DeviceBuffer<uint16_t> d_half(rows * cols);
      CUDA_ASSERT_OK(DequantizeToHalf(dq, ht, d_half.get(), nullptr));
      const std::vector<uint16_t> half = d_half.Download();
      std::vector<float> row(cols);
      const bool bf = ht == HalfType::kBF16;
      for (int64_t r = 0; r < rows; ++r) {
        DequantizeRow(t, m.bytes.data() + r * m.row_bytes, row.data(), cols);
        for (int64_t c = 0; c < cols; ++c) {
          const float got =
              bf ? BF16ToF32(half[r * cols + c]) : F16ToF32(half[r * cols + c]);
          const float want =
              bf ? BF16ToF32(F32ToBF16(row[c])) : F16ToF32(F32ToF16(row[c]));
          ASSERT_NEAR(got, want,
                      std::fabs(want) * (bf ? 0x1p-7f : 0x1p-10f) + 1e-7f)
              << r << "," << c;
        }
      }
      const DeviceMatrix dh{bf ? WType::kBF16 : WType::kF16, rows, cols,
                            cols * 2, d_half.get()};
      const std::vector<float> x = RandomFloats(n * cols, rng);
      DeviceBuffer<float> d_x(x), d_y(n * rows);
      DeviceBuffer<uint16_t> d_xh(n * cols);
      CUDA_ASSERT_OK(ConvertF32ToHalf(d_x.get(), cols, n, cols, ht, d_xh.get(),
                                      cols, nullptr));
      const std::vector<uint16_t> xh = d_xh.Download();
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(xh[i], bf ? F32ToBF16(x[i]) : F32ToF16(x[i])) << i;
      }
      CUDA_ASSERT_OK(
          gemm.RunHalf(dh, d_xh.get(), cols, n, d_y.get(), rows, nullptr));
      std::vector<float> want(n * rows);
      MatMulReference(m.view(), x.data(), cols, n, want.data(), rows);
      // Weights and activations each rounded to the half type.
      ExpectClose(d_y.Download(), rows, want, rows, n,
                  AbsProducts(m, x.data(), cols, n), bf ? 2e-2 : 3e-3);
    }
  }
}

TEST(CudaGemmTest, DequantizeToHalfDenseTypesWithTails) {
  PDSERVE_REQUIRE_GPU();
  std::mt19937 rng(13);
  const int64_t rows = 5, cols = 100;  // 3 full groups of 32 and a tail of 4
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(t));
    const HostMatrix m = MakeMatrix(t, rows, cols, 4, rng);
    DeviceBuffer<uint8_t> d_w(m.bytes);
    const DeviceMatrix dm{static_cast<WType>(t), rows, cols, m.row_bytes,
                          d_w.get()};
    DeviceBuffer<uint16_t> d_half(rows * cols + 1);
    CUDA_ASSERT_OK(
        DequantizeToHalf(dm, HalfType::kBF16, d_half.get(), nullptr));
    const std::vector<uint16_t> half = d_half.Download();
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(t, m.bytes.data() + r * m.row_bytes, row.data(), cols);
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(half[r * cols + c], F32ToBF16(row[c])) << r << "," << c;
      }
    }
    EXPECT_EQ(half[rows * cols], 0) << "wrote past the matrix";
  }
  // Activation conversion with odd strides (the scalar path), both types.
  const std::vector<float> x = RandomFloats(rows * 101, rng, -100, 100);
  DeviceBuffer<float> d_x(x);
  for (HalfType ht : {HalfType::kBF16, HalfType::kF16}) {
    DeviceBuffer<uint16_t> d_xh(rows * 103);
    CUDA_ASSERT_OK(ConvertF32ToHalf(d_x.get(), 101, rows, cols, ht, d_xh.get(),
                                    103, nullptr));
    const std::vector<uint16_t> xh = d_xh.Download();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < 103; ++c) {
        const uint16_t want =
            c >= cols ? 0
                      : (ht == HalfType::kBF16 ? F32ToBF16(x[r * 101 + c])
                                               : F32ToF16(x[r * 101 + c]));
        ASSERT_EQ(xh[r * 103 + c], want) << r << "," << c;
      }
    }
  }
}

TEST(CudaGemmTest, RejectsQuantizedAndMissingInit) {
  float* fake = reinterpret_cast<float*>(uintptr_t{256});
  CublasGemm gemm;  // no Init: must not touch the device
  const DeviceMatrix bf{WType::kBF16, 8, 64, 128, fake};
  EXPECT_EQ(gemm.Run(bf, fake, 64, 16, fake, 8, fake, 4096, nullptr),
            cudaErrorInvalidValue);
  EXPECT_NE(std::string(LastErrorDetail()).find("Init"), std::string::npos);
}

}  // namespace
}  // namespace pdserve::cuda
