// Skinny matrix products (1..8 tokens) that read each weight byte once:
// one warp per output row, f32 accumulation, quantized blocks dequantized
// on the fly (no activation quantization).
#include "kernels/cuda/src/common.cuh"

namespace pdserve {
namespace cuda {
namespace {

using internal::CheckLaunch;
using internal::Fail;

constexpr int kWarpsPerBlock = 4;  // rows per block

template <int NT>
__device__ __forceinline__ void StoreRow(float (&acc)[NT], float* y, int64_t ys,
                                         int64_t row) {
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const float v = internal::WarpSum(acc[t]);
    if ((threadIdx.x & 31) == 0) y[t * ys + row] = v;
  }
}

// Dense weights with 16-byte loads (rows and x 16-byte aligned).
template <int NT, WType T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    DenseVecKernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols,
                   int64_t row_bytes, const float* __restrict__ x, int64_t xs,
                   float* __restrict__ y, int64_t ys) {
  constexpr int V = T == WType::kF32 ? 4 : 8;  // values per 16 bytes
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const uint8_t* wrow = w + row * row_bytes;
  const uint4* wv = reinterpret_cast<const uint4*>(wrow);
  const int64_t nvec = cols / V;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;

  auto consume = [&](const uint4& u, int64_t col) {
    float wf[V];
    if constexpr (T == WType::kF32) {
      wf[0] = __uint_as_float(u.x);
      wf[1] = __uint_as_float(u.y);
      wf[2] = __uint_as_float(u.z);
      wf[3] = __uint_as_float(u.w);
    } else {
      const uint32_t p[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if constexpr (T == WType::kBF16) {
          wf[2 * k] = __uint_as_float(p[k] << 16);
          wf[2 * k + 1] = __uint_as_float(p[k] & 0xffff0000u);
        } else {
          wf[2 * k] = internal::F16Bits(static_cast<uint16_t>(p[k]));
          wf[2 * k + 1] = internal::F16Bits(static_cast<uint16_t>(p[k] >> 16));
        }
      }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float4* xv = reinterpret_cast<const float4*>(x + t * xs + col);
#pragma unroll
      for (int k = 0; k < V / 4; ++k) {
        const float4 a = __ldg(xv + k);
        acc[t] = fmaf(wf[4 * k], a.x, acc[t]);
        acc[t] = fmaf(wf[4 * k + 1], a.y, acc[t]);
        acc[t] = fmaf(wf[4 * k + 2], a.z, acc[t]);
        acc[t] = fmaf(wf[4 * k + 3], a.w, acc[t]);
      }
    }
  };

  int64_t i = lane;
  for (; i + 96 < nvec; i += 128) {
    const uint4 u0 = __ldcs(wv + i);
    const uint4 u1 = __ldcs(wv + i + 32);
    const uint4 u2 = __ldcs(wv + i + 64);
    const uint4 u3 = __ldcs(wv + i + 96);
    consume(u0, i * V);
    consume(u1, (i + 32) * V);
    consume(u2, (i + 64) * V);
    consume(u3, (i + 96) * V);
  }
  for (; i < nvec; i += 32) consume(__ldcs(wv + i), i * V);
  for (int64_t c = nvec * V + lane; c < cols; c += 32) {
    const float wf = internal::LoadElement(T, wrow, c);
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = fmaf(wf, x[t * xs + c], acc[t]);
  }
  StoreRow<NT>(acc, y, ys, row);
}

// Any type, any (natural) alignment: lanes stride over the values.
template <int NT>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    GenericKernel(WType type, const uint8_t* __restrict__ w, int64_t rows,
                  int64_t cols, int64_t row_bytes, const float* __restrict__ x,
                  int64_t xs, float* __restrict__ y, int64_t ys) {
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const uint8_t* wrow = w + row * row_bytes;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  for (int64_t c = threadIdx.x & 31; c < cols; c += 32) {
    const float wf = internal::LoadElement(type, wrow, c);
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = fmaf(wf, x[t * xs + c], acc[t]);
  }
  StoreRow<NT>(acc, y, ys, row);
}

// Quantized blocks: 8 lanes per 32-value block (4 values each), 4 blocks
// per warp step; 2-byte loads (blocks are 34/18/20 bytes).
template <int NT, WType T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    QuantKernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols,
                int64_t row_bytes, const float* __restrict__ x, int64_t xs,
                float* __restrict__ y, int64_t ys) {
  constexpr int kBytes = T == WType::kQ8_0 ? 34 : (T == WType::kQ4_0 ? 18 : 20);
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const int sub = lane & 7;
  const uint8_t* wrow = w + row * row_bytes;
  const int64_t nblocks = cols / 32;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
#pragma unroll 2
  for (int64_t b = lane >> 3; b < nblocks; b += 4) {
    const uint8_t* blk = wrow + b * kBytes;
    const float d = internal::F16Bits(internal::LoadU16(blk));
    float q[4];
    int64_t c[4];
    float m = 0.0f;
    if constexpr (T == WType::kQ8_0) {
      const uint16_t a0 = internal::LoadU16(blk + 2 + 4 * sub);
      const uint16_t a1 = internal::LoadU16(blk + 4 + 4 * sub);
      q[0] = static_cast<float>(static_cast<int8_t>(a0 & 0xff));
      q[1] = static_cast<float>(static_cast<int8_t>(a0 >> 8));
      q[2] = static_cast<float>(static_cast<int8_t>(a1 & 0xff));
      q[3] = static_cast<float>(static_cast<int8_t>(a1 >> 8));
      const int64_t c0 = b * 32 + 4 * sub;
      c[0] = c0;
      c[1] = c0 + 1;
      c[2] = c0 + 2;
      c[3] = c0 + 3;
    } else {
      const int off = T == WType::kQ4_0 ? 2 : 4;
      const uint16_t a = internal::LoadU16(blk + off + 2 * sub);
      const int sh = T == WType::kQ4_0 ? 8 : 0;
      q[0] = static_cast<float>(static_cast<int>(a & 15) - sh);
      q[1] = static_cast<float>(static_cast<int>((a >> 8) & 15) - sh);
      q[2] = static_cast<float>(static_cast<int>((a >> 4) & 15) - sh);
      q[3] = static_cast<float>(static_cast<int>((a >> 12) & 15) - sh);
      if constexpr (T == WType::kQ4_1) {
        m = internal::F16Bits(internal::LoadU16(blk + 2));
      }
      const int64_t c0 = b * 32 + 2 * sub;
      c[0] = c0;
      c[1] = c0 + 1;
      c[2] = c0 + 16;
      c[3] = c0 + 17;
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float* xt = x + t * xs;
      float dot = 0.0f, sum = 0.0f;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float xv = __ldg(xt + c[k]);
        dot = fmaf(q[k], xv, dot);
        if constexpr (T == WType::kQ4_1) sum += xv;
      }
      acc[t] = fmaf(d, dot, acc[t]);
      if constexpr (T == WType::kQ4_1) acc[t] = fmaf(m, sum, acc[t]);
    }
  }
  StoreRow<NT>(acc, y, ys, row);
}

template <int NT>
void LaunchNt(const DeviceMatrix& w, bool vec, const float* x, int64_t xs,
              float* y, int64_t ys, cudaStream_t stream) {
  const unsigned blocks =
      static_cast<unsigned>(internal::CeilDiv(w.rows, kWarpsPerBlock));
  const dim3 threads(kWarpsPerBlock * 32);
  const auto* data = static_cast<const uint8_t*>(w.data);
#define PDSERVE_ARGS data, w.rows, w.cols, w.row_bytes, x, xs, y, ys
  switch (w.type) {
    case WType::kQ8_0:
      QuantKernel<NT, WType::kQ8_0>
          <<<blocks, threads, 0, stream>>>(PDSERVE_ARGS);
      return;
    case WType::kQ4_0:
      QuantKernel<NT, WType::kQ4_0>
          <<<blocks, threads, 0, stream>>>(PDSERVE_ARGS);
      return;
    case WType::kQ4_1:
      QuantKernel<NT, WType::kQ4_1>
          <<<blocks, threads, 0, stream>>>(PDSERVE_ARGS);
      return;
    default:
      break;
  }
  if (vec) {
    switch (w.type) {
      case WType::kBF16:
        DenseVecKernel<NT, WType::kBF16>
            <<<blocks, threads, 0, stream>>>(PDSERVE_ARGS);
        return;
      case WType::kF16:
        DenseVecKernel<NT, WType::kF16>
            <<<blocks, threads, 0, stream>>>(PDSERVE_ARGS);
        return;
      case WType::kF32:
        DenseVecKernel<NT, WType::kF32>
            <<<blocks, threads, 0, stream>>>(PDSERVE_ARGS);
        return;
      default:
        break;
    }
  }
  GenericKernel<NT><<<blocks, threads, 0, stream>>>(w.type, PDSERVE_ARGS);
#undef PDSERVE_ARGS
}

}  // namespace

cudaError_t MatVec(const DeviceMatrix& w, const float* x, int64_t x_stride,
                   int64_t n_tokens, float* y, int64_t y_stride,
                   cudaStream_t stream) {
  if (cudaError_t e = internal::CheckMatrix(w, "MatVec"); e != cudaSuccess) {
    return e;
  }
  if (n_tokens < 1 || n_tokens > kMaxMatVecTokens || x == nullptr ||
      y == nullptr ||
      (n_tokens > 1 && (x_stride < w.cols || y_stride < w.rows)) ||
      internal::CeilDiv(w.rows, kWarpsPerBlock) > 0x7fffffff) {
    return Fail(
        "MatVec: %lld tokens (1..%lld), x_stride %lld (>= cols "
        "%lld), y_stride %lld (>= rows %lld)",
        static_cast<long long>(n_tokens),
        static_cast<long long>(kMaxMatVecTokens),
        static_cast<long long>(x_stride), static_cast<long long>(w.cols),
        static_cast<long long>(y_stride), static_cast<long long>(w.rows));
  }
  const bool vec = internal::Aligned(w.data, 16) && w.row_bytes % 16 == 0 &&
                   internal::Aligned(x, 16) &&
                   (n_tokens == 1 || x_stride % 4 == 0);
  switch (n_tokens) {
    case 1:
      LaunchNt<1>(w, vec, x, x_stride, y, y_stride, stream);
      break;
    case 2:
      LaunchNt<2>(w, vec, x, x_stride, y, y_stride, stream);
      break;
    case 3:
      LaunchNt<3>(w, vec, x, x_stride, y, y_stride, stream);
      break;
    case 4:
      LaunchNt<4>(w, vec, x, x_stride, y, y_stride, stream);
      break;
    case 5:
      LaunchNt<5>(w, vec, x, x_stride, y, y_stride, stream);
      break;
    case 6:
      LaunchNt<6>(w, vec, x, x_stride, y, y_stride, stream);
      break;
    case 7:
      LaunchNt<7>(w, vec, x, x_stride, y, y_stride, stream);
      break;
    default:
      LaunchNt<8>(w, vec, x, x_stride, y, y_stride, stream);
      break;
  }
  return CheckLaunch("MatVec");
}

}  // namespace cuda
}  // namespace pdserve
