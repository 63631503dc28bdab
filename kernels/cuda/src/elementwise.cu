// Embedding gather, RMSNorm (+ residual), per-head RMSNorm, RoPE, SwiGLU and
// the small element-wise kernels.
#include "kernels/cuda/src/common.cuh"

namespace pdserve {
namespace cuda {
namespace {

using internal::CeilDiv;
using internal::CheckLaunch;
using internal::Fail;

constexpr int kRowThreads = 256;

// Grid size for a flat element-wise loop over n items (grid-stride).
unsigned FlatBlocks(int64_t n, int threads) {
  const int64_t b = CeilDiv(n, threads);
  return static_cast<unsigned>(b < 65535 * 8 ? (b < 1 ? 1 : b) : 65535 * 8);
}

__global__ void EmbeddingKernel(WType type, const uint8_t* table,
                                int64_t row_bytes, int64_t vocab, int64_t cols,
                                const int32_t* tokens, float* out,
                                int64_t out_stride) {
  const int64_t r = blockIdx.x;
  const int32_t tok = tokens[r];
  float* o = out + r * out_stride;
  if (tok < 0 || tok >= vocab) {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) o[c] = 0.0f;
    return;
  }
  const uint8_t* row = table + tok * row_bytes;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    o[c] = internal::LoadElement(type, row, c);
  }
}

__global__ void RmsNormResidualKernel(float* residual, const float* add,
                                      const float* weight, float eps, int64_t n,
                                      int64_t stride, float* out) {
  __shared__ float scratch[32];
  float* x = residual + blockIdx.x * stride;
  const float* a = add == nullptr ? nullptr : add + blockIdx.x * stride;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = x[i];
    if (a != nullptr) {
      v += a[i];
      x[i] = v;
    }
    ss = fmaf(v, v, ss);
  }
  ss = internal::BlockSum(ss, scratch);
  const float variance = ss / static_cast<float>(n);
  const float scale = 1.0f / sqrtf(variance + eps);
  float* o = out + blockIdx.x * stride;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    o[i] = weight[i] * (x[i] * scale);
  }
}

// One warp per (row, head).
__global__ void HeadRmsNormKernel(float* x, int64_t rows, int64_t row_stride,
                                  int64_t heads, int64_t head_dim,
                                  const float* weight, float eps) {
  const int64_t item =
      static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (item >= rows * heads) return;
  const int lane = threadIdx.x & 31;
  float* v = x + (item / heads) * row_stride + (item % heads) * head_dim;
  float ss = 0.0f;
  for (int64_t i = lane; i < head_dim; i += 32) ss = fmaf(v[i], v[i], ss);
  ss = internal::WarpSum(ss);
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(head_dim) + eps);
  for (int64_t i = lane; i < head_dim; i += 32) {
    v[i] = weight[i] * (v[i] * scale);
  }
}

__global__ void RopeCosSinKernel(const int32_t* positions, int64_t rows,
                                 int64_t half, int64_t rot_dims, float theta,
                                 float* cos_out, float* sin_out) {
  const int64_t n = rows * half;
  for (int64_t idx =
           blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       idx < n; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / half, i = idx % half;
    const float exponent =
        static_cast<float>(2 * i) / static_cast<float>(rot_dims);
    // powf in double then rounded: matches the host's (nearly) correctly
    // rounded powf in all but rare halfway cases.
    const float base = static_cast<float>(
        pow(static_cast<double>(theta), static_cast<double>(exponent)));
    const float inv_freq = __fdiv_rn(1.0f, base);
    const float angle = __fmul_rn(static_cast<float>(positions[r]), inv_freq);
    float s, c;
    sincosf(angle, &s, &c);
    cos_out[idx] = c;
    sin_out[idx] = s;
  }
}

// One thread per (row, head, pair); no FMA contraction, so the result is
// bitwise the host's RotateHeads for the same tables.
__global__ void ApplyRopeKernel(float* x, int64_t rows, int64_t row_stride,
                                int64_t heads, int64_t head_dim, int64_t half,
                                const float* cos_t, const float* sin_t,
                                int neox) {
  const int64_t n = rows * heads * half;
  for (int64_t idx =
           blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       idx < n; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half;
    const int64_t h = (idx / half) % heads;
    const int64_t r = idx / (half * heads);
    float* v = x + r * row_stride + h * head_dim;
    const int64_t a = neox ? i : 2 * i;
    const int64_t b = neox ? i + half : 2 * i + 1;
    const float x0 = v[a], x1 = v[b];
    const float c = cos_t[r * half + i], s = sin_t[r * half + i];
    v[a] = __fadd_rn(__fmul_rn(x0, c), __fmul_rn(-x1, s));
    v[b] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
  }
}

__global__ void SwiGluKernel(const float* gate, int64_t gs, const float* up,
                             int64_t us, int64_t rows, int64_t n, float* out,
                             int64_t os) {
  const int64_t total = rows * n;
  for (int64_t idx =
           blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / n, i = idx % n;
    const float g = gate[r * gs + i];
    const float u = up[r * us + i];
    out[r * os + i] = g / (1.0f + expf(-g)) * u;
  }
}

__global__ void AddKernel(float* y, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += x[i];
  }
}

__global__ void SigmoidGateKernel(float* x, const float* gate, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] *= 1.0f / (1.0f + expf(-gate[i]));
  }
}

__global__ void SplitQGateKernel(const float* qg, int64_t qgs, int64_t rows,
                                 int64_t heads, int64_t hd, float* q,
                                 int64_t qs, float* gate, int64_t gts) {
  const int64_t width = heads * hd;
  const int64_t total = rows * width;
  for (int64_t idx =
           blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / width, e = idx % width;
    const int64_t h = e / hd, d = e % hd;
    const float* src = qg + r * qgs + 2 * h * hd + d;
    q[r * qs + e] = src[0];
    gate[r * gts + e] = src[hd];
  }
}

}  // namespace

cudaError_t EmbeddingGather(const DeviceMatrix& table, const int32_t* tokens,
                            int64_t n_rows, float* out, int64_t out_stride,
                            cudaStream_t stream) {
  if (cudaError_t e = internal::CheckMatrix(table, "EmbeddingGather");
      e != cudaSuccess) {
    return e;
  }
  if (n_rows < 0 || n_rows > 0x7fffffff || tokens == nullptr ||
      out == nullptr || out_stride < table.cols) {
    return Fail(
        "EmbeddingGather: %lld rows, out_stride %lld < cols %lld or "
        "null pointer",
        static_cast<long long>(n_rows), static_cast<long long>(out_stride),
        static_cast<long long>(table.cols));
  }
  if (n_rows == 0) return cudaSuccess;
  EmbeddingKernel<<<static_cast<unsigned>(n_rows), kRowThreads, 0, stream>>>(
      table.type, static_cast<const uint8_t*>(table.data), table.row_bytes,
      table.rows, table.cols, tokens, out, out_stride);
  return CheckLaunch("EmbeddingGather");
}

cudaError_t RmsNormResidual(float* residual, const float* add,
                            const float* weight, float eps, int64_t rows,
                            int64_t n, int64_t stride, float* out,
                            cudaStream_t stream) {
  if (residual == nullptr || weight == nullptr || out == nullptr || n <= 0 ||
      rows < 0 || rows > 0x7fffffff || stride < n ||
      (out == residual && add != nullptr)) {
    return Fail(
        "RmsNormResidual: rows %lld, n %lld, stride %lld, or null / "
        "aliased pointers",
        static_cast<long long>(rows), static_cast<long long>(n),
        static_cast<long long>(stride));
  }
  if (rows == 0) return cudaSuccess;
  const int threads = n >= 1024 ? 1024 : (n >= 256 ? 256 : 128);
  RmsNormResidualKernel<<<static_cast<unsigned>(rows), threads, 0, stream>>>(
      residual, add, weight, eps, n, stride, out);
  return CheckLaunch("RmsNormResidual");
}

cudaError_t HeadRmsNorm(float* x, int64_t rows, int64_t row_stride,
                        int64_t heads, int64_t head_dim, const float* weight,
                        float eps, cudaStream_t stream) {
  if (x == nullptr || weight == nullptr || rows < 0 || heads <= 0 ||
      head_dim <= 0 || row_stride < heads * head_dim) {
    return Fail(
        "HeadRmsNorm: rows %lld, heads %lld, head_dim %lld, "
        "row_stride %lld",
        static_cast<long long>(rows), static_cast<long long>(heads),
        static_cast<long long>(head_dim), static_cast<long long>(row_stride));
  }
  const int64_t items = rows * heads;
  if (items == 0) return cudaSuccess;
  constexpr int kWarps = 8;
  const int64_t blocks = CeilDiv(items, kWarps);
  if (blocks > 0x7fffffff) return Fail("HeadRmsNorm: too many rows");
  HeadRmsNormKernel<<<static_cast<unsigned>(blocks), kWarps * 32, 0, stream>>>(
      x, rows, row_stride, heads, head_dim, weight, eps);
  return CheckLaunch("HeadRmsNorm");
}

cudaError_t RopeCosSin(const int32_t* positions, int64_t rows, int64_t rot_dims,
                       float theta, float* cos, float* sin,
                       cudaStream_t stream) {
  if (positions == nullptr || cos == nullptr || sin == nullptr || rows < 0 ||
      rot_dims < 2 || rot_dims % 2 != 0 || !(theta > 0.0f)) {
    return Fail("RopeCosSin: rows %lld, rot_dims %lld (even, >= 2), theta %g",
                static_cast<long long>(rows), static_cast<long long>(rot_dims),
                theta);
  }
  const int64_t n = rows * (rot_dims / 2);
  if (n == 0) return cudaSuccess;
  RopeCosSinKernel<<<FlatBlocks(n, 256), 256, 0, stream>>>(
      positions, rows, rot_dims / 2, rot_dims, theta, cos, sin);
  return CheckLaunch("RopeCosSin");
}

cudaError_t ApplyRope(float* x, int64_t rows, int64_t row_stride, int64_t heads,
                      int64_t head_dim, int64_t half, const float* cos,
                      const float* sin, RopeMode mode, cudaStream_t stream) {
  if (x == nullptr || cos == nullptr || sin == nullptr || rows < 0 ||
      heads <= 0 || half < 0 || 2 * half > head_dim ||
      row_stride < heads * head_dim ||
      (mode != RopeMode::kNeox && mode != RopeMode::kInterleaved)) {
    return Fail(
        "ApplyRope: rows %lld, heads %lld, head_dim %lld, half %lld, "
        "row_stride %lld, mode %d",
        static_cast<long long>(rows), static_cast<long long>(heads),
        static_cast<long long>(head_dim), static_cast<long long>(half),
        static_cast<long long>(row_stride), static_cast<int>(mode));
  }
  const int64_t n = rows * heads * half;
  if (n == 0) return cudaSuccess;
  ApplyRopeKernel<<<FlatBlocks(n, 256), 256, 0, stream>>>(
      x, rows, row_stride, heads, head_dim, half, cos, sin,
      mode == RopeMode::kNeox ? 1 : 0);
  return CheckLaunch("ApplyRope");
}

cudaError_t SwiGlu(const float* gate, int64_t gate_stride, const float* up,
                   int64_t up_stride, int64_t rows, int64_t n, float* out,
                   int64_t out_stride, cudaStream_t stream) {
  if (gate == nullptr || up == nullptr || out == nullptr || rows < 0 || n < 0 ||
      gate_stride < n || up_stride < n || out_stride < n) {
    return Fail("SwiGlu: rows %lld, n %lld, strides %lld/%lld/%lld",
                static_cast<long long>(rows), static_cast<long long>(n),
                static_cast<long long>(gate_stride),
                static_cast<long long>(up_stride),
                static_cast<long long>(out_stride));
  }
  if (rows * n == 0) return cudaSuccess;
  SwiGluKernel<<<FlatBlocks(rows * n, 256), 256, 0, stream>>>(
      gate, gate_stride, up, up_stride, rows, n, out, out_stride);
  return CheckLaunch("SwiGlu");
}

cudaError_t AddInPlace(float* y, const float* x, int64_t n,
                       cudaStream_t stream) {
  if (y == nullptr || x == nullptr || n < 0) {
    return Fail("AddInPlace: n %lld or null pointer",
                static_cast<long long>(n));
  }
  if (n == 0) return cudaSuccess;
  AddKernel<<<FlatBlocks(n, 256), 256, 0, stream>>>(y, x, n);
  return CheckLaunch("AddInPlace");
}

cudaError_t SigmoidGate(float* x, const float* gate, int64_t n,
                        cudaStream_t stream) {
  if (x == nullptr || gate == nullptr || n < 0) {
    return Fail("SigmoidGate: n %lld or null pointer",
                static_cast<long long>(n));
  }
  if (n == 0) return cudaSuccess;
  SigmoidGateKernel<<<FlatBlocks(n, 256), 256, 0, stream>>>(x, gate, n);
  return CheckLaunch("SigmoidGate");
}

cudaError_t SplitQGate(const float* qg, int64_t qg_stride, int64_t rows,
                       int64_t heads, int64_t head_dim, float* q,
                       int64_t q_stride, float* gate, int64_t gate_stride,
                       cudaStream_t stream) {
  const int64_t width = heads * head_dim;
  if (qg == nullptr || q == nullptr || gate == nullptr || rows < 0 ||
      heads <= 0 || head_dim <= 0 || qg_stride < 2 * width ||
      q_stride < width || gate_stride < width) {
    return Fail(
        "SplitQGate: rows %lld, heads %lld, head_dim %lld, strides "
        "%lld/%lld/%lld",
        static_cast<long long>(rows), static_cast<long long>(heads),
        static_cast<long long>(head_dim), static_cast<long long>(qg_stride),
        static_cast<long long>(q_stride), static_cast<long long>(gate_stride));
  }
  if (rows == 0) return cudaSuccess;
  SplitQGateKernel<<<FlatBlocks(rows * width, 256), 256, 0, stream>>>(
      qg, qg_stride, rows, heads, head_dim, q, q_stride, gate, gate_stride);
  return CheckLaunch("SplitQGate");
}

}  // namespace cuda
}  // namespace pdserve
