// Flash-decoding over the paged f32 KV cache: one query row per sequence,
// the KV length split across blocks; each block serves up to kHeads query
// heads of one KV head so every K/V byte is read once per block. Within a
// block, a "subgroup" of head_dim/16 lanes handles one key at a time (each
// lane owns 16 consecutive dims, 16-byte loads), four keys per step.
#include <cmath>

#include "kernels/cuda/src/attention.cuh"

namespace pdserve {
namespace cuda {
namespace {

using internal::CeilDiv;

constexpr int kWarps = 4;
constexpr int kHeads = 4;          // query heads per block
constexpr int kKeys = 4;           // keys per subgroup per step
constexpr int kTargetBlocks = 528;  // ~4 blocks per SM on a 132-SM H100/H200
constexpr int kMinSplitKeys = 256;

struct Plan {
  int head_groups = 0;
  int splits = 0;
  int split_len = 0;
};

Plan MakePlan(const AttentionShape& shape, int num_seqs, int max_kv_len) {
  Plan p;
  const int group = shape.num_heads / shape.num_kv_heads;
  p.head_groups = static_cast<int>(CeilDiv(group, kHeads));
  const int64_t base =
      static_cast<int64_t>(num_seqs) * shape.num_kv_heads * p.head_groups;
  const int64_t len = max_kv_len < 1 ? 1 : max_kv_len;
  int64_t splits = CeilDiv(kTargetBlocks, base < 1 ? 1 : base);
  const int64_t max_splits = CeilDiv(len, kMinSplitKeys);
  if (splits > max_splits) splits = max_splits;
  if (splits < 1) splits = 1;
  const int64_t split_len = CeilDiv(CeilDiv(len, splits), 64) * 64;
  p.split_len = static_cast<int>(split_len);
  p.splits = static_cast<int>(CeilDiv(len, split_len));
  return p;
}

template <int D>
__global__ void __launch_bounds__(kWarps * 32)
    DecodeKernel(internal::KvGeom g, internal::BatchView b,
                 const float* __restrict__ q, int64_t qs, float* out,
                 int64_t os, float* ws_acc, float* ws_ml, int num_heads,
                 int group, int head_groups, int splits, int split_len,
                 float scale) {
  constexpr int kLpk = D / 16;        // lanes per key
  constexpr int kSub = 32 / kLpk;     // keys per warp in parallel
  constexpr int kWarpKeys = kSub * kKeys;
  const int s = blockIdx.z, kvh = blockIdx.y;
  const int hg = blockIdx.x % head_groups;
  const int split = blockIdx.x / head_groups;
  const int row = b.q_start[s];
  if (b.q_start[s + 1] <= row) return;
  const int64_t n_keys = static_cast<int64_t>(b.start_pos[s]) + 1;
  const int64_t begin = static_cast<int64_t>(split) * split_len;
  if (begin >= n_keys) return;
  const int64_t end = min(n_keys, begin + split_len);
  const int h0 = kvh * group + hg * kHeads;
  const int nh = min(kHeads, group - hg * kHeads);

  __shared__ __align__(16) float q_sm[kHeads][D];
  __shared__ float red_m[kWarps][kHeads], red_l[kWarps][kHeads];
  __shared__ __align__(16) float red_acc[kWarps][kHeads][D];
  for (int i = threadIdx.x; i < kHeads * D; i += blockDim.x) {
    const int h = i / D, d = i % D;
    q_sm[h][d] = h < nh ? q[row * qs + static_cast<int64_t>(h0 + h) * D + d]
                        : 0.0f;
  }
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane / kLpk, lo = lane % kLpk;
  const int64_t kv_off = static_cast<int64_t>(kvh) * D + lo * 16;
  float m[kHeads], l[kHeads], acc[kHeads][16];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) acc[h][i] = 0.0f;
  }

  // Warp-uniform loop: every lane runs the same iterations (shuffles).
  for (int64_t kw = begin + static_cast<int64_t>(warp) * kWarpKeys; kw < end;
       kw += static_cast<int64_t>(kWarps) * kWarpKeys) {
    const int64_t kb = kw + sub * kKeys;
    int64_t off[kKeys];
    float p[kKeys][kHeads];
#pragma unroll
    for (int c = 0; c < kKeys; ++c) {
      off[c] = kb + c < end ? internal::SlotOffset(g, b, s, kb + c) : -1;
    }
#pragma unroll
    for (int c = 0; c < kKeys; ++c) {
      float4 k4[4];
      if (off[c] >= 0) {
        const float4* kp =
            reinterpret_cast<const float4*>(g.data + off[c] + kv_off);
#pragma unroll
        for (int i = 0; i < 4; ++i) k4[i] = __ldg(kp + i);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) k4[i] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        const float4* qp = reinterpret_cast<const float4*>(&q_sm[h][lo * 16]);
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float4 qv = qp[i];
          dot = fmaf(qv.x, k4[i].x, dot);
          dot = fmaf(qv.y, k4[i].y, dot);
          dot = fmaf(qv.z, k4[i].z, dot);
          dot = fmaf(qv.w, k4[i].w, dot);
        }
#pragma unroll
        for (int o = 1; o < kLpk; o <<= 1) {
          dot += __shfl_xor_sync(0xffffffffu, dot, o);
        }
        p[c][h] = off[c] >= 0 ? dot * scale : -INFINITY;
      }
    }
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      float mx = p[0][h];
#pragma unroll
      for (int c = 1; c < kKeys; ++c) mx = fmaxf(mx, p[c][h]);
      const float m_new = fmaxf(m[h], mx);
      if (m_new == -INFINITY) {
#pragma unroll
        for (int c = 0; c < kKeys; ++c) p[c][h] = 0.0f;
        continue;
      }
      const float alpha = expf(m[h] - m_new);
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < kKeys; ++c) {
        p[c][h] = expf(p[c][h] - m_new);
        sum += p[c][h];
      }
      l[h] = l[h] * alpha + sum;
      m[h] = m_new;
#pragma unroll
      for (int i = 0; i < 16; ++i) acc[h][i] *= alpha;
    }
#pragma unroll
    for (int c = 0; c < kKeys; ++c) {
      if (off[c] < 0) continue;
      const float4* vp = reinterpret_cast<const float4*>(
          g.data + off[c] + g.plane + kv_off);
      float4 v4[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) v4[i] = __ldg(vp + i);
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          acc[h][4 * i] = fmaf(p[c][h], v4[i].x, acc[h][4 * i]);
          acc[h][4 * i + 1] = fmaf(p[c][h], v4[i].y, acc[h][4 * i + 1]);
          acc[h][4 * i + 2] = fmaf(p[c][h], v4[i].z, acc[h][4 * i + 2]);
          acc[h][4 * i + 3] = fmaf(p[c][h], v4[i].w, acc[h][4 * i + 3]);
        }
      }
    }
  }

  // Merge the subgroups of the warp (lanes lo, lo + kLpk, ...).
#pragma unroll
  for (int o = kLpk; o < 32; o <<= 1) {
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[h], o);
      const float lo_l = __shfl_xor_sync(0xffffffffu, l[h], o);
      float ao[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        ao[i] = __shfl_xor_sync(0xffffffffu, acc[h][i], o);
      }
      const float mn = fmaxf(m[h], mo);
      if (mn == -INFINITY) continue;
      const float a = expf(m[h] - mn), bb = expf(mo - mn);
      l[h] = l[h] * a + lo_l * bb;
#pragma unroll
      for (int i = 0; i < 16; ++i) acc[h][i] = acc[h][i] * a + ao[i] * bb;
      m[h] = mn;
    }
  }
  if (sub == 0) {
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
#pragma unroll
      for (int i = 0; i < 16; ++i) red_acc[warp][h][lo * 16 + i] = acc[h][i];
      if (lo == 0) {
        red_m[warp][h] = m[h];
        red_l[warp][h] = l[h];
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nh * D; i += blockDim.x) {
    const int h = i / D, d = i % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, red_m[w][h]);
    float a = 0.0f, sum = 0.0f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = expf(red_m[w][h] - mx);
        a += red_acc[w][h][d] * f;
        sum += red_l[w][h] * f;
      }
    }
    if (splits == 1) {
      out[row * os + static_cast<int64_t>(h0 + h) * D + d] =
          sum > 0.0f ? a / sum : 0.0f;
    } else {
      const int64_t idx =
          (static_cast<int64_t>(s) * num_heads + h0 + h) * splits + split;
      ws_acc[idx * D + d] = a;
      if (d == 0) {
        ws_ml[2 * idx] = mx;
        ws_ml[2 * idx + 1] = sum;
      }
    }
  }
}

// One block (head_dim threads) per (query head, sequence).
__global__ void CombineKernel(internal::BatchView b, const float* ws_acc,
                              const float* ws_ml, int num_heads, int head_dim,
                              int splits, int split_len, float* out,
                              int64_t os) {
  const int h = blockIdx.x, s = blockIdx.y, d = threadIdx.x;
  const int row = b.q_start[s];
  if (b.q_start[s + 1] <= row) return;
  const int64_t n_keys = static_cast<int64_t>(b.start_pos[s]) + 1;
  const int ns = static_cast<int>(min(static_cast<int64_t>(splits), (n_keys + split_len - 1) / split_len));
  const int64_t base = (static_cast<int64_t>(s) * num_heads + h) * splits;
  float mx = -INFINITY;
  for (int i = 0; i < ns; ++i) mx = fmaxf(mx, ws_ml[2 * (base + i)]);
  float a = 0.0f, sum = 0.0f;
  if (mx != -INFINITY) {
    for (int i = 0; i < ns; ++i) {
      const float f = expf(ws_ml[2 * (base + i)] - mx);
      a += ws_acc[(base + i) * head_dim + d] * f;
      sum += ws_ml[2 * (base + i) + 1] * f;
    }
  }
  out[row * os + static_cast<int64_t>(h) * head_dim + d] =
      sum > 0.0f ? a / sum : 0.0f;
}

}  // namespace

int64_t DecodeAttentionWorkspaceBytes(const AttentionShape& shape,
                                      int32_t num_seqs, int32_t max_kv_len) {
  if (shape.num_kv_heads <= 0 || shape.num_heads <= 0 ||
      shape.num_heads % shape.num_kv_heads != 0 || shape.head_dim <= 0 ||
      num_seqs < 0) {
    return 0;
  }
  const Plan p = MakePlan(shape, num_seqs, max_kv_len);
  if (p.splits <= 1) return 0;
  const int64_t items =
      static_cast<int64_t>(num_seqs) * shape.num_heads * p.splits;
  return (items * (shape.head_dim + 2) * 4 + 15) / 16 * 16;
}

cudaError_t DecodeAttention(const DeviceKvCache& kv, int64_t layer,
                            const AttentionBatch& batch,
                            const AttentionShape& shape, const float* q,
                            int64_t q_stride, float* out, int64_t out_stride,
                            void* workspace, int64_t workspace_bytes,
                            cudaStream_t stream) {
  internal::KvGeom g;
  internal::BatchView b;
  float scale = 0.0f;
  if (cudaError_t e =
          internal::MakeViews(kv, layer, batch, "DecodeAttention", &g, &b);
      e != cudaSuccess) {
    return e;
  }
  if (cudaError_t e = internal::CheckShape(kv, shape, "DecodeAttention",
                                           &scale);
      e != cudaSuccess) {
    return e;
  }
  const int64_t width = static_cast<int64_t>(shape.num_heads) * shape.head_dim;
  if (q == nullptr || out == nullptr || q_stride < width ||
      out_stride < width || batch.num_seqs > 65535 ||
      shape.num_kv_heads > 65535) {
    return internal::Fail("DecodeAttention: q/out null or strides %lld/%lld "
                          "< %lld, or %d seqs / %d kv heads > 65535",
                          static_cast<long long>(q_stride),
                          static_cast<long long>(out_stride),
                          static_cast<long long>(width), batch.num_seqs,
                          shape.num_kv_heads);
  }
  if (batch.num_seqs == 0) return cudaSuccess;
  const Plan p = MakePlan(shape, batch.num_seqs, batch.max_kv_len);
  const int64_t need =
      DecodeAttentionWorkspaceBytes(shape, batch.num_seqs, batch.max_kv_len);
  if (need > 0 && (workspace == nullptr || workspace_bytes < need ||
                   !internal::Aligned(workspace, 16))) {
    return internal::Fail("DecodeAttention: workspace %p of %lld bytes, need "
                          "%lld (16-byte aligned)",
                          workspace, static_cast<long long>(workspace_bytes),
                          static_cast<long long>(need));
  }
  float* ws_acc = static_cast<float*>(workspace);
  const int64_t items =
      static_cast<int64_t>(batch.num_seqs) * shape.num_heads * p.splits;
  float* ws_ml = need > 0 ? ws_acc + items * shape.head_dim : nullptr;
  const dim3 grid(static_cast<unsigned>(p.splits * p.head_groups),
                  static_cast<unsigned>(shape.num_kv_heads),
                  static_cast<unsigned>(batch.num_seqs));
  const int group = shape.num_heads / shape.num_kv_heads;
#define PDSERVE_DECODE(D)                                                   \
  DecodeKernel<D><<<grid, kWarps * 32, 0, stream>>>(                        \
      g, b, q, q_stride, out, out_stride, ws_acc, ws_ml, shape.num_heads,   \
      group, p.head_groups, p.splits, p.split_len, scale)
  switch (shape.head_dim) {
    case 64: PDSERVE_DECODE(64); break;
    case 128: PDSERVE_DECODE(128); break;
    default: PDSERVE_DECODE(256); break;
  }
#undef PDSERVE_DECODE
  if (cudaError_t e = internal::CheckLaunch("DecodeAttention");
      e != cudaSuccess) {
    return e;
  }
  if (p.splits == 1) return cudaSuccess;
  CombineKernel<<<dim3(shape.num_heads, batch.num_seqs), shape.head_dim, 0,
                  stream>>>(b, ws_acc, ws_ml, shape.num_heads, shape.head_dim,
                            p.splits, p.split_len, out, out_stride);
  return internal::CheckLaunch("DecodeAttention (combine)");
}

}  // namespace cuda
}  // namespace pdserve
