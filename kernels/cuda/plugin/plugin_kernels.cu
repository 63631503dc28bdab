#include <cuda_bf16.h>
#include <math.h>

#include "kernels/cuda/plugin/plugin_kernels.h"

namespace pdserve::cuda_runner {
namespace {

constexpr int kTileKeys = 32;
constexpr int kThreads = 128;

__global__ void GatherRowsKernel(const float *__restrict__ src,
                                 int64_t src_stride, int64_t src_rows,
                                 const int32_t *__restrict__ index,
                                 int64_t cols, float *__restrict__ dst,
                                 int64_t dst_stride) {
  const int64_t i = blockIdx.x;
  const int32_t s = index[i];
  const bool ok = s >= 0 && s < src_rows;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    dst[i * dst_stride + c] = ok ? src[s * src_stride + c] : 0.0f;
  }
}

// Loads and stores of KV elements: T = float (f32 cache) or uint16_t (bf16
// bits, rounded to nearest even when stored, as cuda::StoreKv).
template <typename T>
__device__ __forceinline__ float LoadKv(const void *kv, int64_t i);
template <>
__device__ __forceinline__ float LoadKv<float>(const void *kv, int64_t i) {
  return static_cast<const float *>(kv)[i];
}
template <>
__device__ __forceinline__ float LoadKv<uint16_t>(const void *kv, int64_t i) {
  return __uint_as_float(
      static_cast<uint32_t>(static_cast<const uint16_t *>(kv)[i]) << 16);
}
__device__ __forceinline__ void StoreKv(float *kv, int64_t i, float v) {
  kv[i] = v;
}
__device__ __forceinline__ void StoreKv(uint16_t *kv, int64_t i, float v) {
  kv[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// One layer of the paged KV cache (f32 or bf16 elements; offsets below are
// in elements) and the step's sequences, as the kernels below address them
// (filled by PagedKvOf).
struct PagedKv {
  void *kv;
  int64_t layer_offset;  // floats from a page's start to this layer's keys
  int64_t page_stride;
  int64_t value_offset;  // page_size * kv_dim
  int64_t kv_dim;
  int32_t page_size;
  int32_t num_pages;
  int32_t num_seqs;
  const int32_t *q_start;
  const int32_t *start_pos;
  const int32_t *page_start;
  const int32_t *page_table;
};

PagedKv PagedKvOf(const cuda::DeviceKvCache &kv, int64_t layer,
                  const cuda::AttentionBatch &batch) {
  PagedKv p;
  p.kv = static_cast<void *>(kv.data);
  p.layer_offset = layer * 2 * kv.page_size * kv.kv_dim;
  p.page_stride = kv.page_stride_floats;
  p.value_offset = kv.page_size * kv.kv_dim;
  p.kv_dim = kv.kv_dim;
  p.page_size = static_cast<int32_t>(kv.page_size);
  p.num_pages = static_cast<int32_t>(kv.num_pages);
  p.num_seqs = batch.num_seqs;
  p.q_start = batch.q_start;
  p.start_pos = batch.start_pos;
  p.page_start = batch.page_start;
  p.page_table = batch.page_table;
  return p;
}

struct AttnParams : PagedKv {
  int32_t group;
  int32_t head_dim;
  float scale;
  const float *q;
  int64_t q_stride;
  float *out;
  int64_t out_stride;
};

// Shared memory: q[g][hd], acc[g][hd], k[T][hd], v[T][hd], s[g][T], m[g],
// l[g], alpha[g], then koff[T] (int64).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    FallbackAttentionKernel(AttnParams p) {
  extern __shared__ float sm[];
  const int g = p.group, hd = p.head_dim;
  float *qs = sm;
  float *acc = qs + g * hd;
  float *ks = acc + g * hd;
  float *vs = ks + kTileKeys * hd;
  float *sc = vs + kTileKeys * hd;
  float *mrow = sc + g * kTileKeys;
  float *lrow = mrow + g;
  float *alpha = lrow + g;
  auto *koff = reinterpret_cast<long long *>(
      sm +
      ((2 * g * hd + 2 * kTileKeys * hd + g * kTileKeys + 3 * g + 1) & ~1));
  __shared__ int s_seq;
  const int r = blockIdx.x;
  const int kvh = blockIdx.y;
  const int tid = threadIdx.x;
  if (tid == 0) {  // the sequence owning row r: last s with q_start[s] <= r
    int lo = 0, hi = p.num_seqs - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.q_start[mid] <= r)
        lo = mid;
      else
        hi = mid - 1;
    }
    s_seq = lo;
  }
  __syncthreads();
  const int s = s_seq;
  const int64_t n_keys =
      static_cast<int64_t>(p.start_pos[s]) + (r - p.q_start[s]) + 1;
  const int32_t pt_begin = p.page_start[s];
  const int32_t pt_len = p.page_start[s + 1] - pt_begin;
  const float *qrow = p.q + r * p.q_stride + static_cast<int64_t>(kvh) * g * hd;
  for (int i = tid; i < g * hd; i += kThreads) {
    qs[i] = qrow[i];
    acc[i] = 0.0f;
  }
  for (int i = tid; i < g; i += kThreads) {
    mrow[i] = -INFINITY;
    lrow[i] = 0.0f;
  }
  __syncthreads();
  for (int64_t k0 = 0; k0 < n_keys; k0 += kTileKeys) {
    const int nk =
        n_keys - k0 < kTileKeys ? static_cast<int>(n_keys - k0) : kTileKeys;
    if (tid < nk) {
      const int64_t key = k0 + tid;
      const int64_t e = key / p.page_size;
      long long off = -1;
      if (e < pt_len) {
        const int32_t page = p.page_table[pt_begin + e];
        if (page >= 0 && page < p.num_pages) {
          off = page * p.page_stride + p.layer_offset +
                (key % p.page_size) * p.kv_dim + static_cast<int64_t>(kvh) * hd;
        }
      }
      koff[tid] = off;
    }
    __syncthreads();
    for (int i = tid; i < nk * hd; i += kThreads) {
      const int j = i / hd, d = i % hd;
      const long long off = koff[j];
      ks[i] = off >= 0 ? LoadKv<T>(p.kv, off + d) : 0.0f;
      vs[i] = off >= 0 ? LoadKv<T>(p.kv, off + p.value_offset + d) : 0.0f;
    }
    __syncthreads();
    for (int i = tid; i < g * nk; i += kThreads) {
      const int h = i / nk, j = i % nk;
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot += qs[h * hd + d] * ks[j * hd + d];
      sc[h * kTileKeys + j] = koff[j] >= 0 ? dot * p.scale : -INFINITY;
    }
    __syncthreads();
    for (int h = tid; h < g; h += kThreads) {
      float mx = -INFINITY;
      for (int j = 0; j < nk; ++j) mx = fmaxf(mx, sc[h * kTileKeys + j]);
      const float m_old = mrow[h];
      const float m_new = fmaxf(m_old, mx);
      float a = 1.0f, sum = 0.0f;
      if (m_new != -INFINITY) {
        a = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
        for (int j = 0; j < nk; ++j) {
          const float v = sc[h * kTileKeys + j];
          const float e = v == -INFINITY ? 0.0f : expf(v - m_new);
          sc[h * kTileKeys + j] = e;
          sum += e;
        }
      } else {
        for (int j = 0; j < nk; ++j) sc[h * kTileKeys + j] = 0.0f;
      }
      lrow[h] = lrow[h] * a + sum;
      mrow[h] = m_new;
      alpha[h] = a;
    }
    __syncthreads();
    for (int i = tid; i < g * hd; i += kThreads) {
      const int h = i / hd, d = i % hd;
      float v = acc[i] * alpha[h];
      for (int j = 0; j < nk; ++j) v += sc[h * kTileKeys + j] * vs[j * hd + d];
      acc[i] = v;
    }
    __syncthreads();
  }
  float *orow = p.out + r * p.out_stride + static_cast<int64_t>(kvh) * g * hd;
  for (int i = tid; i < g * hd; i += kThreads) {
    const float l = lrow[i / hd];
    orow[i] = l > 0.0f ? acc[i] / l : 0.0f;
  }
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

struct PrepParams : PagedKv {
  QkvPrep prep;
};

constexpr int kPrepWarps = 4;

// Block (row, y): warp w takes head y * kPrepWarps + w (staged in shared
// memory); the last y copies the row's value heads into the cache. Spreading
// heads over blocks keeps a one-row (batch-1 decode) launch short.
template <typename T>
__global__ void __launch_bounds__(kPrepWarps * 32)
    QkNormRopeStoreKernel(PrepParams p) {
  extern __shared__ float stage[];  // [kPrepWarps][head_dim]
  __shared__ long long s_dst;       // this row's key slot, -1: none
  const QkvPrep &q = p.prep;
  const int r = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hd = q.head_dim, half = q.half;
  if (threadIdx.x == 0) {
    int lo = 0, hi = p.num_seqs - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.q_start[mid] <= r)
        lo = mid;
      else
        hi = mid - 1;
    }
    const int64_t pos =
        static_cast<int64_t>(p.start_pos[lo]) + (r - p.q_start[lo]);
    const int64_t e = pos / p.page_size;
    long long dst = -1;
    if (pos >= 0 && e < p.page_start[lo + 1] - p.page_start[lo]) {
      const int32_t page = p.page_table[p.page_start[lo] + e];
      if (page >= 0 && page < p.num_pages) {
        dst = page * p.page_stride + p.layer_offset +
              (pos % p.page_size) * p.kv_dim;
      }
    }
    s_dst = dst;
  }
  __syncthreads();
  const long long dst = s_dst;
  float *row = q.qkv + static_cast<int64_t>(r) * q.stride;
  const int heads = q.num_heads + q.num_kv_heads;
  const int head_blocks = (heads + kPrepWarps - 1) / kPrepWarps;
  if (static_cast<int>(blockIdx.y) == head_blocks) {  // the value heads
    if (dst >= 0) {
      const float *vv = row + static_cast<int64_t>(heads) * hd;
      T *vdst = static_cast<T *>(p.kv) + dst + p.value_offset;
      for (int64_t i = threadIdx.x; i < p.kv_dim; i += blockDim.x) {
        StoreKv(vdst, i, vv[i]);
      }
    }
    return;
  }
  const int h = static_cast<int>(blockIdx.y) * kPrepWarps + warp;
  if (h >= heads) return;  // no block-wide barrier below
  const float *cs = q.cos + static_cast<int64_t>(r) * half;
  const float *sn = q.sin + static_cast<int64_t>(r) * half;
  float *w = stage + warp * hd;
  const bool is_k = h >= q.num_heads;
  float *v = row + static_cast<int64_t>(h) * hd;  // k heads follow q heads
  const float *nw = is_k ? q.k_norm : q.q_norm;
  for (int i = lane; i < hd; i += 32) w[i] = v[i];
  __syncwarp();
  if (nw != nullptr) {
    float ss = 0.0f;
    for (int i = lane; i < hd; i += 32) ss = fmaf(w[i], w[i], ss);
    ss = WarpSum(ss);
    const float scale = 1.0f / sqrtf(ss / static_cast<float>(hd) + q.eps);
    for (int i = lane; i < hd; i += 32) w[i] = nw[i] * (w[i] * scale);
    __syncwarp();
  }
  for (int i = lane; i < half; i += 32) {  // each lane owns its pairs
    const int a = q.neox ? i : 2 * i;
    const int b = q.neox ? i + half : 2 * i + 1;
    const float x0 = w[a], x1 = w[b];
    const float c = cs[i], s = sn[i];
    w[a] = __fadd_rn(__fmul_rn(x0, c), __fmul_rn(-x1, s));
    w[b] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
  }
  __syncwarp();
  T *kdst = (is_k && dst >= 0) ? static_cast<T *>(p.kv) + dst +
                                     static_cast<int64_t>(h - q.num_heads) * hd
                               : nullptr;
  for (int i = lane; i < hd; i += 32) {
    v[i] = w[i];
    if (kdst != nullptr) StoreKv(kdst, i, w[i]);
  }
}

}  // namespace

cudaError_t GatherRows(const float *src, int64_t src_stride, int64_t src_rows,
                       const int32_t *index, int64_t rows, int64_t cols,
                       float *dst, int64_t dst_stride, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (src == nullptr || dst == nullptr || index == nullptr ||
      rows > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  const int threads = cols >= 256 ? 256 : 64;
  GatherRowsKernel<<<static_cast<unsigned>(rows), threads, 0, stream>>>(
      src, src_stride, src_rows, index, cols, dst, dst_stride);
  return cudaGetLastError();
}

int64_t FallbackAttentionSmemBytes(const cuda::AttentionShape &shape) {
  if (shape.num_kv_heads <= 0 || shape.num_heads % shape.num_kv_heads != 0) {
    return 0;
  }
  const int64_t g = shape.num_heads / shape.num_kv_heads;
  const int64_t hd = shape.head_dim;
  const int64_t floats =
      ((2 * g * hd + 2 * kTileKeys * hd + g * kTileKeys + 3 * g + 1) & ~1LL);
  return floats * 4 + kTileKeys * 8;
}

cudaError_t PrepareFallbackAttention(int64_t bytes) {
  const cudaError_t e = cudaFuncSetAttribute(
      FallbackAttentionKernel<float>,
      cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  return cudaFuncSetAttribute(FallbackAttentionKernel<uint16_t>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(bytes));
}

cudaError_t FallbackAttention(const cuda::DeviceKvCache &kv, int64_t layer,
                              const cuda::AttentionBatch &batch,
                              const cuda::AttentionShape &shape, const float *q,
                              int64_t q_stride, float *out, int64_t out_stride,
                              cudaStream_t stream) {
  if (batch.total_rows <= 0 || batch.num_seqs <= 0) return cudaSuccess;
  if (shape.num_kv_heads <= 0 || shape.num_heads % shape.num_kv_heads != 0 ||
      shape.head_dim < 1 || shape.head_dim > 512 ||
      kv.kv_dim != static_cast<int64_t>(shape.num_kv_heads) * shape.head_dim ||
      layer < 0 || layer >= kv.num_layers || kv.num_pages > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  AttnParams p;
  static_cast<PagedKv &>(p) = PagedKvOf(kv, layer, batch);
  p.group = shape.num_heads / shape.num_kv_heads;
  p.head_dim = shape.head_dim;
  p.scale = shape.scale != 0.0f
                ? shape.scale
                : 1.0f / sqrtf(static_cast<float>(shape.head_dim));
  p.q = q;
  p.q_stride = q_stride;
  p.out = out;
  p.out_stride = out_stride;
  const dim3 grid(static_cast<unsigned>(batch.total_rows),
                  static_cast<unsigned>(shape.num_kv_heads));
  const int64_t smem = FallbackAttentionSmemBytes(shape);
  if (kv.type == cuda::KvType::kBF16) {
    FallbackAttentionKernel<uint16_t><<<grid, kThreads, smem, stream>>>(p);
  } else {
    FallbackAttentionKernel<float><<<grid, kThreads, smem, stream>>>(p);
  }
  return cudaGetLastError();
}

cudaError_t QkNormRopeStore(const QkvPrep &prep, const cuda::DeviceKvCache &kv,
                            int64_t layer, const cuda::AttentionBatch &batch,
                            cudaStream_t stream) {
  if (batch.total_rows <= 0 || batch.num_seqs <= 0) return cudaSuccess;
  const int64_t width =
      static_cast<int64_t>(prep.num_heads + 2 * prep.num_kv_heads) *
      prep.head_dim;
  if (prep.qkv == nullptr || prep.cos == nullptr || prep.sin == nullptr ||
      prep.head_dim < 1 || prep.head_dim > 512 || prep.half < 0 ||
      2 * prep.half > prep.head_dim || prep.stride < width ||
      prep.num_heads < 1 || prep.num_kv_heads < 1 || kv.data == nullptr ||
      kv.kv_dim != static_cast<int64_t>(prep.num_kv_heads) * prep.head_dim ||
      layer < 0 || layer >= kv.num_layers || kv.num_pages > 0x7fffffff ||
      batch.q_start == nullptr ||
      batch.start_pos == nullptr || batch.page_start == nullptr ||
      batch.page_table == nullptr) {
    return cudaErrorInvalidValue;
  }
  PrepParams p;
  static_cast<PagedKv &>(p) = PagedKvOf(kv, layer, batch);
  p.prep = prep;
  const int heads = prep.num_heads + prep.num_kv_heads;
  const dim3 grid(
      static_cast<unsigned>(batch.total_rows),
      static_cast<unsigned>((heads + kPrepWarps - 1) / kPrepWarps + 1));
  const size_t smem = kPrepWarps * prep.head_dim * sizeof(float);
  if (kv.type == cuda::KvType::kBF16) {
    QkNormRopeStoreKernel<uint16_t><<<grid, kPrepWarps * 32, smem, stream>>>(p);
  } else {
    QkNormRopeStoreKernel<float><<<grid, kPrepWarps * 32, smem, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace pdserve::cuda_runner
