// CUDA element-wise kernels against the CPU kernels (kernels/ops.h,
// kernels/dtype.h). Tolerances (stated per test):
//   exact (bitwise): embedding gather of f32/f16/bf16, ApplyRope with given
//     cos/sin tables, SplitQGate, AddInPlace;
//   1e-6 relative: embedding of quantized types (FMA vs separate multiply
//     and add for Q4_1), RMSNorm (f32 vs double sum of squares);
//   2e-6 relative: SwiGLU and sigmoid gate (device expf vs the host's SIMD
//     exp, a few ulp each); 5e-6: RoPE against kernels' ApplyRope, which
//     computes its own cos/sin;
//   cos/sin tables: 1e-6 + 2^-22 * |angle| absolute (inv_freq may differ by
//     one ulp between host powf and the device's double pow).
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/dtype.h"
#include "kernels/ops.h"
#include "tests/gpu/kernels_test_util.h"

namespace pdserve::cuda {
namespace {

using testing::DeviceBuffer;
using testing::RandomFloats;

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                float rel, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * (1.0f + std::fabs(want[i])))
        << what << " element " << i;
  }
}

TEST(CudaElementwiseTest, EmbeddingAllTypes) {
  PDSERVE_REQUIRE_GPU();
  std::mt19937 rng(1);
  const int64_t vocab = 37, cols = 96;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                  DType::kQ4_0, DType::kQ4_1}) {
    SCOPED_TRACE(DTypeName(t));
    const int64_t row_bytes = RowBytes(t, cols).value();
    std::vector<uint8_t> table(vocab * row_bytes);
    for (int64_t r = 0; r < vocab; ++r) {
      const std::vector<float> v = RandomFloats(cols, rng);
      QuantizeRow(t, v.data(), table.data() + r * row_bytes, cols);
    }
    const std::vector<int32_t> tokens = {0, 36, 5, -1, 37, 5, 12};
    DeviceBuffer<uint8_t> d_table(table);
    DeviceBuffer<int32_t> d_tok(tokens);
    const int64_t stride = cols + 3;
    DeviceBuffer<float> d_out(tokens.size() * stride);
    DeviceMatrix m{static_cast<WType>(t), vocab, cols, row_bytes,
                   d_table.get()};
    CUDA_ASSERT_OK(EmbeddingGather(m, d_tok.get(), tokens.size(), d_out.get(),
                                   stride, nullptr));
    const std::vector<float> out = d_out.Download();
    std::vector<float> want(cols);
    for (size_t r = 0; r < tokens.size(); ++r) {
      const int32_t tok = tokens[r];
      if (tok < 0 || tok >= vocab) {
        std::fill(want.begin(), want.end(), 0.0f);  // out of range: zeros
      } else {
        DequantizeRow(t, table.data() + tok * row_bytes, want.data(), cols);
      }
      for (int64_t c = 0; c < cols; ++c) {
        const float g = out[r * stride + c];
        if (t == DType::kF32 || t == DType::kF16 || t == DType::kBF16) {
          ASSERT_EQ(g, want[c]) << "row " << r << " col " << c;
        } else {
          ASSERT_NEAR(g, want[c], 1e-6f * (1.0f + std::fabs(want[c])))
              << "row " << r << " col " << c;
        }
      }
    }
  }
}

TEST(CudaElementwiseTest, RmsNormResidualMatchesCpu) {
  PDSERVE_REQUIRE_GPU();
  std::mt19937 rng(2);
  for (int64_t n : {7, 128, 1000, 4096}) {
    SCOPED_TRACE(n);
    const int64_t rows = 5, stride = n + 5;
    std::vector<float> res = RandomFloats(rows * stride, rng, -3, 3);
    const std::vector<float> add = RandomFloats(rows * stride, rng);
    const std::vector<float> w = RandomFloats(n, rng, 0.5f, 1.5f);
    DeviceBuffer<float> d_res(res), d_add(add), d_w(w), d_out(rows * stride);
    CUDA_ASSERT_OK(RmsNormResidual(d_res.get(), d_add.get(), d_w.get(), 1e-5f,
                                   rows, n, stride, d_out.get(), nullptr));
    const std::vector<float> got_res = d_res.Download();
    const std::vector<float> got = d_out.Download();
    std::vector<float> want(n);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < n; ++i)
        res[r * stride + i] += add[r * stride + i];
      RmsNorm(res.data() + r * stride, w.data(), 1e-5f, n, want.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got_res[r * stride + i], res[r * stride + i]);  // exact add
        ASSERT_NEAR(got[r * stride + i], want[i],
                    1e-6f * (1.0f + std::fabs(want[i])));
      }
    }
    // Without add, out == residual in place.
    CUDA_ASSERT_OK(RmsNormResidual(d_res.get(), nullptr, d_w.get(), 1e-5f, rows,
                                   n, stride, d_res.get(), nullptr));
    const std::vector<float> inplace = d_res.Download();
    for (int64_t r = 0; r < rows; ++r) {
      RmsNorm(res.data() + r * stride, w.data(), 1e-5f, n, want.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(inplace[r * stride + i], want[i],
                    1e-6f * (1.0f + std::fabs(want[i])));
      }
    }
  }
}

TEST(CudaElementwiseTest, HeadRmsNormMatchesCpu) {
  PDSERVE_REQUIRE_GPU();
  std::mt19937 rng(3);
  const int64_t rows = 9, heads = 5, hd = 128, stride = heads * hd + 64;
  std::vector<float> x = RandomFloats(rows * stride, rng, -2, 2);
  const std::vector<float> w = RandomFloats(hd, rng, 0.5f, 1.5f);
  DeviceBuffer<float> d_x(x), d_w(w);
  CUDA_ASSERT_OK(HeadRmsNorm(d_x.get(), rows, stride, heads, hd, d_w.get(),
                             1e-6f, nullptr));
  const std::vector<float> got = d_x.Download();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x.data() + r * stride + h * hd;
      RmsNorm(v, w.data(), 1e-6f, hd, v);
    }
  }
  ExpectNear(got, x, 1e-6f, "head rmsnorm");  // padding columns untouched
}

TEST(CudaElementwiseTest, RopeMatchesCpu) {
  PDSERVE_REQUIRE_GPU();
  std::mt19937 rng(4);
  const int64_t rows = 6, heads = 3, hd = 64, stride = heads * hd + 8;
  for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kInterleaved}) {
    for (int64_t rot : {int64_t{64}, int64_t{32}}) {  // full and partial
      SCOPED_TRACE(rot);
      const std::vector<int32_t> pos = {0, 1, 17, 1000, 32767, 5};
      const float theta = 1000000.0f;
      const int64_t half = rot / 2;
      DeviceBuffer<int32_t> d_pos(pos);
      DeviceBuffer<float> d_cos(rows * half), d_sin(rows * half);
      CUDA_ASSERT_OK(RopeCosSin(d_pos.get(), rows, rot, theta, d_cos.get(),
                                d_sin.get(), nullptr));
      const std::vector<float> cs = d_cos.Download(), sn = d_sin.Download();
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < half; ++i) {
          const float inv = 1.0f / std::pow(theta, static_cast<float>(2 * i) /
                                                       static_cast<float>(rot));
          const float angle = static_cast<float>(pos[r]) * inv;
          const float tol = 1e-6f + std::ldexp(std::fabs(angle), -22);
          ASSERT_NEAR(cs[r * half + i], std::cos(angle), tol) << r << "," << i;
          ASSERT_NEAR(sn[r * half + i], std::sin(angle), tol) << r << "," << i;
        }
      }
      // Rotation with these tables is bitwise the CPU's arithmetic.
      std::vector<float> x = RandomFloats(rows * stride, rng);
      DeviceBuffer<float> d_x(x);
      const RopeMode mode =
          style == RopeStyle::kNeox ? RopeMode::kNeox : RopeMode::kInterleaved;
      CUDA_ASSERT_OK(ApplyRope(d_x.get(), rows, stride, heads, hd, half,
                               d_cos.get(), d_sin.get(), mode, nullptr));
      const std::vector<float> got = d_x.Download();
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t h = 0; h < heads; ++h) {
          float* v = x.data() + r * stride + h * hd;
          for (int64_t i = 0; i < half; ++i) {
            const int64_t a = style == RopeStyle::kNeox ? i : 2 * i;
            const int64_t b = style == RopeStyle::kNeox ? i + half : 2 * i + 1;
            const float x0 = v[a], x1 = v[b];
            const float c = cs[r * half + i], s = sn[r * half + i];
            const float p0 = x0 * c, p1 = -x1 * s, p2 = x1 * c, p3 = x0 * s;
            v[a] = p0 + p1;
            v[b] = p2 + p3;
          }
        }
      }
      for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], x[i]) << i;
      // And close to kernels' ApplyRope (its own cos/sin) for small positions.
      std::vector<float> y = RandomFloats(stride, rng);
      std::vector<float> want = y;
      ::pdserve::ApplyRope(want.data(), heads, hd, rot, pos[2], theta, style);
      DeviceBuffer<float> d_y(y);
      CUDA_ASSERT_OK(ApplyRope(d_y.get(), 1, stride, heads, hd, half,
                               d_cos.get() + 2 * half, d_sin.get() + 2 * half,
                               mode, nullptr));
      ExpectNear(d_y.Download(), want, 5e-6f, "rope vs kernels ApplyRope");
    }
  }
}

TEST(CudaElementwiseTest, SwiGluGateSplitAdd) {
  PDSERVE_REQUIRE_GPU();
  std::mt19937 rng(5);
  const int64_t rows = 4, n = 333, gs = 2 * n, us = 2 * n;
  // Fused [gate | up] rows, out in place over the gate half.
  std::vector<float> gu = RandomFloats(rows * 2 * n, rng, -6, 6);
  DeviceBuffer<float> d_gu(gu);
  CUDA_ASSERT_OK(SwiGlu(d_gu.get(), gs, d_gu.get() + n, us, rows, n, d_gu.get(),
                        gs, nullptr));
  const std::vector<float> got = d_gu.Download();
  std::vector<float> want(n);
  for (int64_t r = 0; r < rows; ++r) {
    ::pdserve::SwiGlu(gu.data() + r * gs, gu.data() + r * gs + n, n,
                      want.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(got[r * gs + i], want[i],
                  2e-6f * (1.0f + std::fabs(want[i])));
      ASSERT_EQ(got[r * gs + n + i], gu[r * gs + n + i]);  // up untouched
    }
  }

  const int64_t heads = 3, hd = 16, width = heads * hd;
  const std::vector<float> qg = RandomFloats(rows * 2 * width, rng, -4, 4);
  DeviceBuffer<float> d_qg(qg), d_q(rows * width), d_gate(rows * width);
  CUDA_ASSERT_OK(SplitQGate(d_qg.get(), 2 * width, rows, heads, hd, d_q.get(),
                            width, d_gate.get(), width, nullptr));
  std::vector<float> q(rows * width), gate(rows * width);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t d = 0; d < hd; ++d) {
        q[r * width + h * hd + d] = qg[r * 2 * width + 2 * h * hd + d];
        gate[r * width + h * hd + d] = qg[r * 2 * width + 2 * h * hd + hd + d];
      }
    }
  }
  EXPECT_EQ(d_q.Download(), q);
  EXPECT_EQ(d_gate.Download(), gate);
  CUDA_ASSERT_OK(SigmoidGate(d_q.get(), d_gate.get(), rows * width, nullptr));
  std::vector<float> gated = q;
  for (size_t i = 0; i < gated.size(); ++i) {
    gated[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
  }
  ExpectNear(d_q.Download(), gated, 2e-6f, "sigmoid gate");
  CUDA_ASSERT_OK(AddInPlace(d_q.get(), d_gate.get(), rows * width, nullptr));
  for (size_t i = 0; i < gated.size(); ++i) gated[i] += gate[i];
  ExpectNear(d_q.Download(), gated, 0.0f, "add");
}

TEST(CudaElementwiseTest, PrepareKernelsSucceedsTwice) {
  PDSERVE_REQUIRE_GPU();
  CUDA_ASSERT_OK(PrepareKernels());
  CUDA_ASSERT_OK(PrepareKernels());  // cached per device
}

// Host-side precondition checks: no device needed, nothing is launched.
TEST(CudaElementwiseTest, RejectsBadShapesWithDetail) {
  float* fake = reinterpret_cast<float*>(uintptr_t{256});
  EXPECT_EQ(RmsNormResidual(fake, nullptr, fake, 1e-5f, 2, 8, 4, fake, nullptr),
            cudaErrorInvalidValue);
  EXPECT_NE(std::string(LastErrorDetail()).find("stride 4"), std::string::npos)
      << LastErrorDetail();
  EXPECT_EQ(
      ApplyRope(fake, 1, 64, 1, 64, 33, fake, fake, RopeMode::kNeox, nullptr),
      cudaErrorInvalidValue);
  EXPECT_EQ(RopeCosSin(reinterpret_cast<int32_t*>(fake), 1, 3, 1e4f, fake, fake,
                       nullptr),
            cudaErrorInvalidValue);
  DeviceMatrix q4{WType::kQ4_0, 4, 48, 18 * 2, fake};  // 48: not blocks of 32
  EXPECT_EQ(EmbeddingGather(q4, reinterpret_cast<int32_t*>(fake), 1, fake, 48,
                            nullptr),
            cudaErrorInvalidValue);
  EXPECT_NE(std::string(LastErrorDetail()).find("48 columns"),
            std::string::npos)
      << LastErrorDetail();
}

}  // namespace
}  // namespace pdserve::cuda
