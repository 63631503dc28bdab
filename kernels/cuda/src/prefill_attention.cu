// Causal prefill attention over the paged f32 KV cache (flash-style: K/V
// tiles in shared memory, online softmax, f32 SIMT). A block computes 64
// "query rows" = (new token, query head) pairs of one sequence and one KV
// head: R = 64 / heads_per_block tokens times heads_per_block heads of the
// KV head's group, so each K/V tile serves every head of the group.
// 256 threads as 16 x 16: thread (ty, tx) owns query rows ty + 16 i
// (i < 4), score columns tx + 16 j and output columns tx * 4 + 64 c + e.

#include "kernels/cuda/src/attention.cuh"

namespace pdserve {
namespace cuda {
namespace {

using internal::CeilDiv;

constexpr int kRows = 64;  // (token, head) pairs per block
constexpr int kThreads = 256;

template <int D>
struct Cfg {
  static constexpr int kBk = D == 256 ? 32 : 64;  // keys per tile
  static constexpr int kQPitch = D + 4;           // padded Q/K rows
  static constexpr int kPPitch = kBk + 1;
  static constexpr int kCols = kBk / 16;  // score columns per thread
  static constexpr int kOut = D / 64;     // float4 output chunks
  // P (the probabilities) reuses the K tile's space once scores are done.
  static_assert(kRows * kPPitch <= kBk * kQPitch, "P must fit in K's space");
  static constexpr int64_t kSmemFloats =
      kRows * kQPitch + kBk * kQPitch + kBk * D;
  static constexpr int64_t kSmemBytes = kSmemFloats * 4 + kBk * 8;
};

template <int D, typename T>
__global__ void __launch_bounds__(kThreads)
    PrefillKernel(internal::KvGeom g, internal::BatchView b,
                  const float* __restrict__ q, int64_t qs, float* out,
                  int64_t os, int group, int heads_per_block, int head_groups,
                  float scale) {
  using C = Cfg<D>;
  extern __shared__ __align__(16) float smem[];
  float* q_sm = smem;                        // [kRows][kQPitch]
  float* k_sm = q_sm + kRows * C::kQPitch;   // [kBk][kQPitch]
  float* v_sm = k_sm + C::kBk * C::kQPitch;  // [kBk][D]
  float* p_sm = k_sm;                        // [kRows][kPPitch]
  int64_t* kofs = reinterpret_cast<int64_t*>(v_sm + C::kBk * D);

  const int s = blockIdx.z;
  const int kvh = blockIdx.y / head_groups, hg = blockIdx.y % head_groups;
  const int rows_per_block = kRows / heads_per_block;
  const int t0 = blockIdx.x * rows_per_block;
  const int qbeg = b.q_start[s];
  const int len = b.q_start[s + 1] - qbeg;
  if (t0 >= len) return;
  const int64_t start = b.start_pos[s];
  const int h_first = kvh * group + hg * heads_per_block;
  const int nh = min(heads_per_block, group - hg * heads_per_block);
  const int t_end = min(len, t0 + rows_per_block);
  const int64_t kv_end = start + t_end;  // keys [0, kv_end)

  // Query tile.
  for (int i = threadIdx.x; i < kRows * D; i += kThreads) {
    const int m = i / D, d = i % D;
    const int t = t0 + m / heads_per_block, h = m % heads_per_block;
    const bool ok = m < rows_per_block * heads_per_block && t < t_end && h < nh;
    q_sm[m * C::kQPitch + d] =
        ok ? q[(qbeg + t) * qs + static_cast<int64_t>(h_first + h) * D + d]
           : 0.0f;
  }

  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  int64_t qpos[4];  // last key each owned row may see; -1: padding row
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = ty + 16 * i;
    const int t = t0 + m / heads_per_block, h = m % heads_per_block;
    const bool ok = m < rows_per_block * heads_per_block && t < t_end && h < nh;
    qpos[i] = ok ? start + t : -1;
  }
  float row_m[4], row_l[4], o[4][C::kOut][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    row_m[i] = -INFINITY;
    row_l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < C::kOut; ++c) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][c][e] = 0.0f;
    }
  }

  for (int64_t kt = 0; kt < kv_end; kt += C::kBk) {
    __syncthreads();  // previous tile fully consumed
    if (threadIdx.x < C::kBk) {
      const int64_t j = kt + threadIdx.x;
      kofs[threadIdx.x] =
          j < kv_end ? internal::SlotOffset(g, b, s, j) : int64_t{-1};
    }
    __syncthreads();
    using Io = internal::KvIo<T>;
    constexpr int kCh = Io::kChunk;  // elements per 16-byte load
    for (int i = threadIdx.x; i < C::kBk * (D / kCh); i += kThreads) {
      const int r = i / (D / kCh), dc = i % (D / kCh);
      float kv[kCh], vv[kCh];
      if (kofs[r] >= 0) {
        const int64_t at = kofs[r] + static_cast<int64_t>(kvh) * D + dc * kCh;
        Io::LoadChunk(g.data, at, kv);
        Io::LoadChunk(g.data, at + g.plane, vv);
      } else {
#pragma unroll
        for (int e = 0; e < kCh; ++e) kv[e] = vv[e] = 0.0f;
      }
#pragma unroll
      for (int e = 0; e < kCh; e += 4) {
        *reinterpret_cast<float4*>(k_sm + r * C::kQPitch + dc * kCh + e) =
            make_float4(kv[e], kv[e + 1], kv[e + 2], kv[e + 3]);
        *reinterpret_cast<float4*>(v_sm + r * D + dc * kCh + e) =
            make_float4(vv[e], vv[e + 1], vv[e + 2], vv[e + 3]);
      }
    }
    __syncthreads();

    // Scores.
    float sc[4][C::kCols];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < C::kCols; ++j) sc[i][j] = 0.0f;
    }
#pragma unroll 4
    for (int d = 0; d < D; d += 4) {
      float4 qv[4], kv[C::kCols];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        qv[i] = *reinterpret_cast<const float4*>(
            q_sm + (ty + 16 * i) * C::kQPitch + d);
      }
#pragma unroll
      for (int j = 0; j < C::kCols; ++j) {
        kv[j] = *reinterpret_cast<const float4*>(
            k_sm + (tx + 16 * j) * C::kQPitch + d);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < C::kCols; ++j) {
          sc[i][j] = fmaf(qv[i].x, kv[j].x, sc[i][j]);
          sc[i][j] = fmaf(qv[i].y, kv[j].y, sc[i][j]);
          sc[i][j] = fmaf(qv[i].z, kv[j].z, sc[i][j]);
          sc[i][j] = fmaf(qv[i].w, kv[j].w, sc[i][j]);
        }
      }
    }

    __syncthreads();  // every thread is done reading k_sm (P goes there)

    // Online softmax per owned row (16 tx lanes share a row).
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < C::kCols; ++j) {
        const int kl = tx + 16 * j;
        const int64_t key = kt + kl;
        const bool ok = kofs[kl] >= 0 && key <= qpos[i];
        sc[i][j] = ok ? sc[i][j] * scale : -INFINITY;
        mx = fmaxf(mx, sc[i][j]);
      }
#pragma unroll
      for (int off = 1; off < 16; off <<= 1) {
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      }
      const float m_new = fmaxf(row_m[i], mx);
      float alpha = 1.0f;
      if (m_new == -INFINITY) {
#pragma unroll
        for (int j = 0; j < C::kCols; ++j) sc[i][j] = 0.0f;
      } else {
        alpha = expf(row_m[i] - m_new);
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < C::kCols; ++j) {
          sc[i][j] = expf(sc[i][j] - m_new);
          sum += sc[i][j];
        }
        row_l[i] = row_l[i] * alpha + sum;
        row_m[i] = m_new;
      }
#pragma unroll
      for (int c = 0; c < C::kOut; ++c) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[i][c][e] *= alpha;
      }
#pragma unroll
      for (int j = 0; j < C::kCols; ++j) {
        p_sm[(ty + 16 * i) * C::kPPitch + tx + 16 * j] = sc[i][j];
      }
    }
    __syncthreads();

    // O += P V.
    const int kn =
        static_cast<int>(kv_end - kt < C::kBk ? kv_end - kt : C::kBk);
    for (int k = 0; k < kn; ++k) {
      float pv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) pv[i] = p_sm[(ty + 16 * i) * C::kPPitch + k];
#pragma unroll
      for (int c = 0; c < C::kOut; ++c) {
        const float4 v =
            *reinterpret_cast<const float4*>(v_sm + k * D + tx * 4 + 64 * c);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          o[i][c][0] = fmaf(pv[i], v.x, o[i][c][0]);
          o[i][c][1] = fmaf(pv[i], v.y, o[i][c][1]);
          o[i][c][2] = fmaf(pv[i], v.z, o[i][c][2]);
          o[i][c][3] = fmaf(pv[i], v.w, o[i][c][3]);
        }
      }
    }
  }

  // Normalise and write.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float l = row_l[i];
#pragma unroll
    for (int off = 1; off < 16; off <<= 1) {
      l += __shfl_xor_sync(0xffffffffu, l, off);
    }
    if (qpos[i] < 0) continue;
    const int m = ty + 16 * i;
    const int t = t0 + m / heads_per_block, h = m % heads_per_block;
    float* dst = out + (qbeg + t) * os + static_cast<int64_t>(h_first + h) * D;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int c = 0; c < C::kOut; ++c) {
#pragma unroll
      for (int e = 0; e < 4; ++e) dst[tx * 4 + 64 * c + e] = o[i][c][e] * inv;
    }
  }
}

template <int D, typename T>
cudaError_t EnsureSmem() {
  static std::atomic<uint64_t> done{0};
  return internal::EnsureSharedMemory(
      reinterpret_cast<const void*>(PrefillKernel<D, T>),
      static_cast<int>(Cfg<D>::kSmemBytes), &done, "PrefillAttention");
}

template <int D, typename T>
cudaError_t Launch(const internal::KvGeom& g, const internal::BatchView& b,
                   const AttentionBatch& batch, const AttentionShape& shape,
                   const float* q, int64_t qs, float* out, int64_t os,
                   float scale, cudaStream_t stream) {
  if (cudaError_t e = EnsureSmem<D, T>(); e != cudaSuccess) return e;
  const int group = shape.num_heads / shape.num_kv_heads;
  const int hpb = group < kRows ? group : kRows;
  const int head_groups = static_cast<int>(CeilDiv(group, hpb));
  const int rows_per_block = kRows / hpb;
  const int64_t tiles = CeilDiv(batch.max_q_len, rows_per_block);
  const dim3 grid(static_cast<unsigned>(tiles),
                  static_cast<unsigned>(shape.num_kv_heads * head_groups),
                  static_cast<unsigned>(batch.num_seqs));
  PrefillKernel<D, T><<<grid, kThreads, Cfg<D>::kSmemBytes, stream>>>(
      g, b, q, qs, out, os, group, hpb, head_groups, scale);
  return internal::CheckLaunch("PrefillAttention");
}

}  // namespace

namespace internal {
cudaError_t PreparePrefill() {
  if (cudaError_t e = EnsureSmem<64, float>(); e != cudaSuccess) return e;
  if (cudaError_t e = EnsureSmem<128, float>(); e != cudaSuccess) return e;
  if (cudaError_t e = EnsureSmem<256, float>(); e != cudaSuccess) return e;
  if (cudaError_t e = EnsureSmem<64, uint16_t>(); e != cudaSuccess) return e;
  if (cudaError_t e = EnsureSmem<128, uint16_t>(); e != cudaSuccess) return e;
  return EnsureSmem<256, uint16_t>();
}
}  // namespace internal

cudaError_t PrefillAttention(const DeviceKvCache& kv, int64_t layer,
                             const AttentionBatch& batch,
                             const AttentionShape& shape, const float* q,
                             int64_t q_stride, float* out, int64_t out_stride,
                             cudaStream_t stream) {
  internal::KvGeom g;
  internal::BatchView b;
  float scale = 0.0f;
  if (cudaError_t e =
          internal::MakeViews(kv, layer, batch, "PrefillAttention", &g, &b);
      e != cudaSuccess) {
    return e;
  }
  if (cudaError_t e =
          internal::CheckShape(kv, shape, "PrefillAttention", &scale);
      e != cudaSuccess) {
    return e;
  }
  const int64_t width = static_cast<int64_t>(shape.num_heads) * shape.head_dim;
  const int group = shape.num_heads / shape.num_kv_heads;
  const int hpb = group < kRows ? group : kRows;
  if (q == nullptr || out == nullptr || q_stride < width ||
      out_stride < width || batch.num_seqs > 65535 ||
      static_cast<int64_t>(shape.num_kv_heads) * CeilDiv(group, hpb) > 65535) {
    return internal::Fail(
        "PrefillAttention: q/out null or strides "
        "%lld/%lld < %lld, or %d seqs / %d kv heads too "
        "many",
        static_cast<long long>(q_stride), static_cast<long long>(out_stride),
        static_cast<long long>(width), batch.num_seqs, shape.num_kv_heads);
  }
  if (batch.num_seqs == 0 || batch.max_q_len == 0) return cudaSuccess;
  const bool bf16 = kv.type == KvType::kBF16;
#define PDSERVE_PREFILL(D)                                                \
  return bf16 ? Launch<D, uint16_t>(g, b, batch, shape, q, q_stride, out, \
                                    out_stride, scale, stream)            \
              : Launch<D, float>(g, b, batch, shape, q, q_stride, out,    \
                                 out_stride, scale, stream)
  switch (shape.head_dim) {
    case 64:
      PDSERVE_PREFILL(64);
    case 128:
      PDSERVE_PREFILL(128);
    default:
      PDSERVE_PREFILL(256);
  }
#undef PDSERVE_PREFILL
}

}  // namespace cuda
}  // namespace pdserve
