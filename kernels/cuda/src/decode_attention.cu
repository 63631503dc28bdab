// Flash-decoding over the paged f32 KV cache: one query row per sequence,
// the KV length split across blocks; each block serves up to kHeads query
// heads of one KV head so every K/V byte is read once per block. Within a
// block, a "subgroup" of head_dim/16 lanes handles one key at a time (each
// lane owns 16 consecutive dims, 16-byte loads), two keys per step with all
// their K and V loads issued together.
//
// The number of splits is chosen so that the grid fills whole waves of the
// resident blocks of the current device (queried once per device), so the
// workspace size depends on the device as well as on the batch.
#include <algorithm>
#include <cmath>
#include <mutex>

#include "kernels/cuda/src/attention.cuh"

namespace pdserve {
namespace cuda {
namespace {

using internal::CeilDiv;

constexpr int kWarps = 4;
constexpr int kHeads = 4;  // query heads per block
constexpr int kKeys = 2;   // keys per subgroup per step
constexpr int kMinSplitKeys = 256;
constexpr int kFallbackSlots = 132 * 3;  // H100/H200 SMs x blocks per SM

struct Plan {
  int head_groups = 0;
  int splits = 0;  // used: ceil(len / split_len) <= chosen
  int split_len = 0;
  int chosen = 0;  // the split count picked; sizes the workspace, and is
                   // non-decreasing in max_kv_len (a workspace sized for
                   // the longest context serves every shorter one)
};

int ResidentSlots();  // after the kernel (needs its occupancy)

Plan MakePlan(const AttentionShape& shape, int num_seqs, int max_kv_len) {
  Plan p;
  const int group = shape.num_heads / shape.num_kv_heads;
  p.head_groups = static_cast<int>(CeilDiv(group, kHeads));
  int64_t base =
      static_cast<int64_t>(num_seqs) * shape.num_kv_heads * p.head_groups;
  if (base < 1) base = 1;
  const int64_t len = max_kv_len < 1 ? 1 : max_kv_len;
  const int64_t slots = ResidentSlots();
  const int64_t max_splits =
      std::min(CeilDiv(len, kMinSplitKeys), 8 * CeilDiv(slots, base));
  // The split count whose grid fills its waves best (fewest splits on ties).
  int64_t splits = 1;
  double best = 0.0;
  for (int64_t sp = 1; sp <= max_splits; ++sp) {
    const int64_t blocks = base * sp;
    const double eff = static_cast<double>(blocks) /
                       static_cast<double>(CeilDiv(blocks, slots) * slots);
    if (eff > best + 1e-9) {
      best = eff;
      splits = sp;
    }
  }
  const int64_t split_len = CeilDiv(CeilDiv(len, splits), 64) * 64;
  p.chosen = static_cast<int>(splits);
  p.split_len = static_cast<int>(split_len);
  p.splits = static_cast<int>(CeilDiv(len, split_len));
  return p;
}

template <int D, typename T>
__global__ void __launch_bounds__(kWarps * 32, 3)
    DecodeKernel(internal::KvGeom g, internal::BatchView b,
                 const float* __restrict__ q, int64_t qs, float* out,
                 int64_t os, float* ws_acc, float* ws_ml, int num_heads,
                 int group, int head_groups, int splits, int split_len,
                 float scale) {
  constexpr int kLpk = D / 16;     // lanes per key
  constexpr int kSub = 32 / kLpk;  // keys per warp in parallel
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
  constexpr int kUnits = kWarps * kSub;  // subgroups in the block
  __shared__ float red_m[kUnits][kHeads], red_l[kUnits][kHeads];
  __shared__ __align__(16) float red_acc[kUnits][kHeads][D];
  for (int i = threadIdx.x; i < kHeads * D; i += blockDim.x) {
    const int h = i / D, d = i % D;
    q_sm[h][d] =
        h < nh ? q[row * qs + static_cast<int64_t>(h0 + h) * D + d] : 0.0f;
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
    float kf[kKeys][16], vf[kKeys][16];
    float p[kKeys][kHeads];
#pragma unroll
    for (int c = 0; c < kKeys; ++c) {
      off[c] = kb + c < end ? internal::SlotOffset(g, b, s, kb + c) : -1;
    }
    // Issue every K and V load of the step before any arithmetic.
    using Io = internal::KvIo<T>;
#pragma unroll
    for (int c = 0; c < kKeys; ++c) {
      if (off[c] >= 0) {
#pragma unroll
        for (int j = 0; j < 16; j += Io::kChunk) {
          Io::LoadChunk(g.data, off[c] + kv_off + j, &kf[c][j]);
        }
#pragma unroll
        for (int j = 0; j < 16; j += Io::kChunk) {
          Io::LoadChunk(g.data, off[c] + g.plane + kv_off + j, &vf[c][j]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          kf[c][j] = 0.0f;
          vf[c][j] = 0.0f;
        }
      }
    }
#pragma unroll
    for (int c = 0; c < kKeys; ++c) {
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        const float4* qp = reinterpret_cast<const float4*>(&q_sm[h][lo * 16]);
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float4 qv = qp[i];
          dot = fmaf(qv.x, kf[c][4 * i], dot);
          dot = fmaf(qv.y, kf[c][4 * i + 1], dot);
          dot = fmaf(qv.z, kf[c][4 * i + 2], dot);
          dot = fmaf(qv.w, kf[c][4 * i + 3], dot);
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
      if (mx > m[h]) {  // new running max: rescale (rare after warm-up)
        const float alpha = expf(m[h] - mx);  // 0 when m was -inf
        l[h] *= alpha;
#pragma unroll
        for (int i = 0; i < 16; ++i) acc[h][i] *= alpha;
        m[h] = mx;
      }
      if (m[h] == -INFINITY) {  // nothing valid yet
#pragma unroll
        for (int c = 0; c < kKeys; ++c) p[c][h] = 0.0f;
        continue;
      }
#pragma unroll
      for (int c = 0; c < kKeys; ++c) {
        p[c][h] = expf(p[c][h] - m[h]);
        l[h] += p[c][h];
      }
    }
#pragma unroll
    for (int c = 0; c < kKeys; ++c) {
      if (off[c] < 0) continue;
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          acc[h][i] = fmaf(p[c][h], vf[c][i], acc[h][i]);
        }
      }
    }
  }

  // Every subgroup's partial state goes to shared memory; the block merges
  // them below (no register-heavy shuffle merge).
  const int unit = warp * kSub + sub;
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
#pragma unroll
    for (int i = 0; i < 16; i += 4) {
      *reinterpret_cast<float4*>(&red_acc[unit][h][lo * 16 + i]) =
          make_float4(acc[h][i], acc[h][i + 1], acc[h][i + 2], acc[h][i + 3]);
    }
    if (lo == 0) {
      red_m[unit][h] = m[h];
      red_l[unit][h] = l[h];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nh * D; i += blockDim.x) {
    const int h = i / D, d = i % D;
    float mx = -INFINITY;
    for (int u = 0; u < kUnits; ++u) mx = fmaxf(mx, red_m[u][h]);
    float a = 0.0f, sum = 0.0f;
    if (mx != -INFINITY) {
      for (int u = 0; u < kUnits; ++u) {
        const float f = expf(red_m[u][h] - mx);
        a += red_acc[u][h][d] * f;
        sum += red_l[u][h] * f;
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
  const int ns = static_cast<int>(
      min(static_cast<int64_t>(splits), (n_keys + split_len - 1) / split_len));
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

// Blocks of DecodeKernel<128, float> resident at once on the current device
// (SMs x occupancy), cached per device; a fallback when the query fails.
int ResidentSlots() {
  static std::mutex mu;
  static int cache[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
    cudaGetLastError();
    return kFallbackSlots;
  }
  std::lock_guard<std::mutex> lock(mu);
  if (cache[dev] == 0) {
    int sms = 0, per_sm = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, DecodeKernel<128, float>, kWarps * 32, 0) != cudaSuccess ||
        sms <= 0 || per_sm <= 0) {
      cudaGetLastError();
      return kFallbackSlots;
    }
    cache[dev] = sms * per_sm;
  }
  return cache[dev];
}

}  // namespace

namespace internal {
cudaError_t PrepareDecode() {
  ResidentSlots();
  return cudaSuccess;
}
}  // namespace internal

int64_t DecodeAttentionWorkspaceBytes(const AttentionShape& shape,
                                      int32_t num_seqs, int32_t max_kv_len) {
  if (shape.num_kv_heads <= 0 || shape.num_heads <= 0 ||
      shape.num_heads % shape.num_kv_heads != 0 || shape.head_dim <= 0 ||
      num_seqs < 0) {
    return 0;
  }
  const Plan p = MakePlan(shape, num_seqs, max_kv_len);
  if (p.chosen <= 1) return 0;
  const int64_t items =
      static_cast<int64_t>(num_seqs) * shape.num_heads * p.chosen;
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
  if (cudaError_t e =
          internal::CheckShape(kv, shape, "DecodeAttention", &scale);
      e != cudaSuccess) {
    return e;
  }
  const int64_t width = static_cast<int64_t>(shape.num_heads) * shape.head_dim;
  if (q == nullptr || out == nullptr || q_stride < width ||
      out_stride < width || batch.num_seqs > 65535 ||
      shape.num_kv_heads > 65535) {
    return internal::Fail(
        "DecodeAttention: q/out null or strides %lld/%lld "
        "< %lld, or %d seqs / %d kv heads > 65535",
        static_cast<long long>(q_stride), static_cast<long long>(out_stride),
        static_cast<long long>(width), batch.num_seqs, shape.num_kv_heads);
  }
  if (batch.num_seqs == 0) return cudaSuccess;
  const Plan p = MakePlan(shape, batch.num_seqs, batch.max_kv_len);
  const int64_t need =
      DecodeAttentionWorkspaceBytes(shape, batch.num_seqs, batch.max_kv_len);
  if (need > 0 && (workspace == nullptr || workspace_bytes < need ||
                   !internal::Aligned(workspace, 16))) {
    return internal::Fail(
        "DecodeAttention: workspace %p of %lld bytes, need "
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
#define PDSERVE_DECODE(D, T)                                              \
  DecodeKernel<D, T><<<grid, kWarps * 32, 0, stream>>>(                   \
      g, b, q, q_stride, out, out_stride, ws_acc, ws_ml, shape.num_heads, \
      group, p.head_groups, p.splits, p.split_len, scale)
  const bool bf16 = kv.type == KvType::kBF16;
  switch (shape.head_dim) {
    case 64:
      if (bf16) {
        PDSERVE_DECODE(64, uint16_t);
      } else {
        PDSERVE_DECODE(64, float);
      }
      break;
    case 128:
      if (bf16) {
        PDSERVE_DECODE(128, uint16_t);
      } else {
        PDSERVE_DECODE(128, float);
      }
      break;
    default:
      if (bf16) {
        PDSERVE_DECODE(256, uint16_t);
      } else {
        PDSERVE_DECODE(256, float);
      }
      break;
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
