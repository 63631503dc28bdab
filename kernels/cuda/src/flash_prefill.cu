// FlashPrefillAttention (cuda_kernels.h): causal grouped-query attention
// over the paged KV cache on bf16 tensor cores, FlashAttention-2 style.
//
// A block of 4 warps takes 64 query rows = (new token, query head) pairs of
// one sequence and one KV head (the heads of the KV head's group side by
// side, so each K/V tile serves all of them) and walks the keys the rows can
// see in tiles of kBk: the tile is read out of the paged cache into shared
// memory as bf16, then each warp, for its 16 rows,
//   S = Q K^T              mma.sync m16n8k16 (mma.cuh), f32 accumulators
//   m, l, O                online softmax in the log2 domain, P = 2^(S - m)
//                          rounded to bf16 (l sums the rounded values)
//   O += P V               P straight from the S accumulators as A fragments
// so no more than one kBk-wide tile of scores per row ever exists, in
// registers. A warp whose rows all end before a tile skips its products.
// head_dim up to 256: computed at D = 64, 128 or 256 with the dims past
// head_dim zero.
#include <cmath>

#include "kernels/cuda/src/attention.cuh"
#include "kernels/cuda/src/mma.cuh"

namespace pdserve {
namespace cuda {
namespace {

using internal::CeilDiv;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16 * kWarps;  // (token, head) rows per block
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFull = 0xffffffffu;

template <int D>
struct FlashCfg {
  static constexpr int kBk = D == 256 ? 32 : 64;  // keys per tile
  // bf16 per shared row: D + 8 makes the fragment loads conflict-free.
  static constexpr int kPitch = D + 8;
  static constexpr int kNt = kBk / 8;  // score tiles of 8 keys
  static constexpr int kOt = D / 8;    // output tiles of 8 dims
  // Q [kRows], K [kBk], V [kBk] rows of kPitch bf16, then kBk offsets.
  static constexpr int64_t kSmemBytes =
      int64_t{kRows + 2 * kBk} * kPitch * 2 + kBk * 8;
};

struct FlashArgs {
  internal::KvGeom g;
  internal::BatchView b;
  const float* q;
  int64_t qs;
  float* out;
  int64_t os;
  int group;        // query heads per KV head
  int hpb;          // heads per block
  int head_groups;  // blocks per KV head's group
  int head_dim;
  float scale_log2;  // softmax scale * log2(e)
};

// The block's rows: sequence s, tokens [t0, t_end) of it, heads
// [h_first, h_first + nh) of KV head kvh.
struct BlockRows {
  int s, kvh, h_first, nh, t0, t_end, qbeg;
  int64_t start;  // positions of s already cached
};

// False when the block has no rows (past its sequence's length).
__device__ __forceinline__ bool FindRows(const FlashArgs& p, BlockRows* r) {
  r->s = blockIdx.z;
  r->kvh = blockIdx.y / p.head_groups;
  const int hg = blockIdx.y % p.head_groups;
  r->t0 = blockIdx.x * (kRows / p.hpb);
  r->qbeg = p.b.q_start[r->s];
  const int len = p.b.q_start[r->s + 1] - r->qbeg;
  if (r->t0 >= len) return false;
  r->start = p.b.start_pos[r->s];
  r->h_first = r->kvh * p.group + hg * p.hpb;
  r->nh = min(p.hpb, p.group - hg * p.hpb);
  r->t_end = min(len, r->t0 + kRows / p.hpb);
  return true;
}

// Query row m of the block as (token t, head h); false for padding rows.
__device__ __forceinline__ bool RowOf(const FlashArgs& p, const BlockRows& r,
                                      int m, int* t, int* h) {
  *t = r.t0 + m / p.hpb;
  *h = m % p.hpb;
  return m < (kRows / p.hpb) * p.hpb && *t < r.t_end && *h < r.nh;
}

template <int D>
__device__ void LoadQ(const FlashArgs& p, const BlockRows& r, uint16_t* q_sm) {
  for (int i = threadIdx.x; i < kRows * D; i += kThreads) {
    const int m = i / D, d = i % D;
    int t, h;
    float x = 0.0f;
    if (d < p.head_dim && RowOf(p, r, m, &t, &h)) {
      x = p.q[static_cast<int64_t>(r.qbeg + t) * p.qs +
              static_cast<int64_t>(r.h_first + h) * p.head_dim + d];
    }
    q_sm[m * FlashCfg<D>::kPitch + d] = internal::Bf16Bits(x);
  }
}

// Keys [kt, kt + kBk) of the block's KV head into k_sm / v_sm (bf16, rows
// kPitch apart; absent keys and dims past head_dim are zero) and their slot
// offsets into kofs (-1: absent). Begins and ends with a block barrier.
template <int D, typename T>
__device__ void LoadKvTile(const FlashArgs& p, const BlockRows& r, int64_t kt,
                           int64_t kv_end, uint16_t* k_sm, uint16_t* v_sm,
                           int64_t* kofs) {
  using C = FlashCfg<D>;
  using Io = internal::KvIo<T>;
  __syncthreads();  // the previous tile is consumed
  if (threadIdx.x < C::kBk) {
    const int64_t j = kt + threadIdx.x;
    kofs[threadIdx.x] =
        j < kv_end ? internal::SlotOffset(p.g, p.b, r.s, j) : int64_t{-1};
  }
  __syncthreads();
  const int64_t head = static_cast<int64_t>(r.kvh) * p.head_dim;
  if (p.head_dim == D) {  // 16-byte loads
    constexpr int kCh = Io::kChunk;
    for (int i = threadIdx.x; i < C::kBk * (D / kCh); i += kThreads) {
      const int row = i / (D / kCh), dc = (i % (D / kCh)) * kCh;
      float kx[kCh], vx[kCh];
      if (kofs[row] >= 0) {
        const int64_t at = kofs[row] + head + dc;
        Io::LoadChunk(p.g.data, at, kx);
        Io::LoadChunk(p.g.data, at + p.g.plane, vx);
      } else {
#pragma unroll
        for (int e = 0; e < kCh; ++e) kx[e] = vx[e] = 0.0f;
      }
      auto* kd = reinterpret_cast<uint32_t*>(k_sm + row * C::kPitch + dc);
      auto* vd = reinterpret_cast<uint32_t*>(v_sm + row * C::kPitch + dc);
#pragma unroll
      for (int e = 0; e < kCh / 2; ++e) {
        kd[e] = internal::PackBf16(kx[2 * e], kx[2 * e + 1]);
        vd[e] = internal::PackBf16(vx[2 * e], vx[2 * e + 1]);
      }
    }
  } else {  // head_dim < D: element by element
    for (int i = threadIdx.x; i < C::kBk * D; i += kThreads) {
      const int row = i / D, d = i % D;
      float kx = 0.0f, vx = 0.0f;
      if (d < p.head_dim && kofs[row] >= 0) {
        const int64_t at = kofs[row] + head + d;
        kx = Io::Load(p.g.data, at);
        vx = Io::Load(p.g.data, at + p.g.plane);
      }
      k_sm[row * C::kPitch + d] = internal::Bf16Bits(kx);
      v_sm[row * C::kPitch + d] = internal::Bf16Bits(vx);
    }
  }
  __syncthreads();
}

// One warp's running state for its rows g and g + 8 (index `half`).
template <int D>
struct WarpState {
  float o[FlashCfg<D>::kOt][4];  // C fragments of O
  float m[2];                    // running max (log2 domain)
  float l[2];                    // this lane's part of the running sum
  int64_t qpos[2];               // last key the row may see; -1: padding
};

// S = Q K^T for the warp's 16 rows and the tile's kBk keys.
template <int D>
__device__ __forceinline__ void Scores(const uint16_t* qw, const uint16_t* k_sm,
                                       float (&sc)[FlashCfg<D>::kNt][4]) {
  using C = FlashCfg<D>;
#pragma unroll
  for (int nt = 0; nt < C::kNt; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) sc[nt][e] = 0.0f;
  }
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4];
    internal::LoadA(qw + kk * 16, C::kPitch, a);
#pragma unroll
    for (int nt = 0; nt < C::kNt; ++nt) {
      uint32_t b[2];
      internal::LoadBNMajor(k_sm + nt * 8 * C::kPitch + kk * 16, C::kPitch, b);
      internal::MmaBf16(sc[nt], a, b);
    }
  }
}

// Masks and scales the scores, updates (m, l), rescales O and turns the
// scores into bf16-rounded probabilities in place.
template <int D>
__device__ __forceinline__ void OnlineSoftmax(const FlashArgs& p,
                                              const int64_t* kofs, int64_t kt,
                                              float (&sc)[FlashCfg<D>::kNt][4],
                                              WarpState<D>& w) {
  using C = FlashCfg<D>;
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < C::kNt; ++nt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int col = nt * 8 + 2 * t + j;
        const bool ok = kofs[col] >= 0 && kt + col <= w.qpos[half];
        float& x = sc[nt][2 * half + j];
        x = ok ? x * p.scale_log2 : -INFINITY;
        mx = fmaxf(mx, x);
      }
    }
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));  // the row's 4 lanes
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
    const float m_new = fmaxf(w.m[half], mx);
    float alpha = 1.0f, sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < C::kNt; ++nt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float& x = sc[nt][2 * half + j];
        x = m_new == -INFINITY
                ? 0.0f
                : internal::LoBf16(internal::PackBf16(exp2f(x - m_new), 0.0f));
        sum += x;
      }
    }
    if (m_new != -INFINITY) {
      alpha = exp2f(w.m[half] - m_new);  // 0 when the old max is -inf
      w.m[half] = m_new;
    }
    w.l[half] = w.l[half] * alpha + sum;
#pragma unroll
    for (int ot = 0; ot < C::kOt; ++ot) {
      w.o[ot][2 * half] *= alpha;
      w.o[ot][2 * half + 1] *= alpha;
    }
  }
}

// O += P V: the probabilities of score tiles 2kk and 2kk + 1 are the A
// fragment of keys [16kk, 16kk + 16).
template <int D>
__device__ __forceinline__ void AccumulatePV(
    const uint16_t* v_sm, const float (&sc)[FlashCfg<D>::kNt][4],
    WarpState<D>& w) {
  using C = FlashCfg<D>;
#pragma unroll
  for (int kk = 0; kk < C::kBk / 16; ++kk) {
    uint32_t a[4];
    a[0] = internal::PackBf16(sc[2 * kk][0], sc[2 * kk][1]);
    a[1] = internal::PackBf16(sc[2 * kk][2], sc[2 * kk][3]);
    a[2] = internal::PackBf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
    a[3] = internal::PackBf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
    for (int ot = 0; ot < C::kOt; ++ot) {
      uint32_t b[2];
      internal::LoadBKMajor(v_sm + kk * 16 * C::kPitch + ot * 8, C::kPitch, b);
      internal::MmaBf16(w.o[ot], a, b);
    }
  }
}

// Normalises O and writes the warp's valid rows.
template <int D>
__device__ void WriteRows(const FlashArgs& p, const BlockRows& r,
                          WarpState<D>& w) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float l = w.l[half];
    l += __shfl_xor_sync(kFull, l, 1);
    l += __shfl_xor_sync(kFull, l, 2);
    int tok, h;
    if (w.qpos[half] < 0 || !RowOf(p, r, warp * 16 + g + 8 * half, &tok, &h)) {
      continue;
    }
    float* dst = p.out + static_cast<int64_t>(r.qbeg + tok) * p.os +
                 static_cast<int64_t>(r.h_first + h) * p.head_dim;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int ot = 0; ot < FlashCfg<D>::kOt; ++ot) {
      const int d = ot * 8 + 2 * t;
      if (d < p.head_dim) dst[d] = w.o[ot][2 * half] * inv;
      if (d + 1 < p.head_dim) dst[d + 1] = w.o[ot][2 * half + 1] * inv;
    }
  }
}

template <int D, typename T>
__global__ void __launch_bounds__(kThreads) FlashPrefillKernel(FlashArgs p) {
  using C = FlashCfg<D>;
  extern __shared__ __align__(16) uint16_t flash_sm[];
  uint16_t* q_sm = flash_sm;                  // [kRows][kPitch]
  uint16_t* k_sm = q_sm + kRows * C::kPitch;  // [kBk][kPitch]
  uint16_t* v_sm = k_sm + C::kBk * C::kPitch;
  auto* kofs = reinterpret_cast<int64_t*>(v_sm + C::kBk * C::kPitch);
  BlockRows r;
  if (!FindRows(p, &r)) return;  // uniform over the block
  LoadQ<D>(p, r, q_sm);
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
  WarpState<D> w;
  int64_t last = -1;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    int tok, h;
    w.qpos[half] = RowOf(p, r, warp * 16 + g + 8 * half, &tok, &h)
                       ? r.start + tok
                       : int64_t{-1};
    w.m[half] = -INFINITY;
    w.l[half] = 0.0f;
    last = w.qpos[half] > last ? w.qpos[half] : last;
  }
#pragma unroll
  for (int ot = 0; ot < C::kOt; ++ot) {
#pragma unroll
    for (int e = 0; e < 4; ++e) w.o[ot][e] = 0.0f;
  }
  for (int o = 16; o > 0; o >>= 1) {  // the warp's last visible key
    const int64_t other = __shfl_xor_sync(kFull, last, o);
    last = other > last ? other : last;
  }
  const int64_t kv_end = r.start + r.t_end;  // keys [0, kv_end)
  for (int64_t kt = 0; kt < kv_end; kt += C::kBk) {
    LoadKvTile<D, T>(p, r, kt, kv_end, k_sm, v_sm, kofs);
    if (kt > last) continue;  // warp-uniform: the tile is masked for all rows
    float sc[C::kNt][4];
    Scores<D>(q_sm + warp * 16 * C::kPitch, k_sm, sc);
    OnlineSoftmax<D>(p, kofs, kt, sc, w);
    AccumulatePV<D>(v_sm, sc, w);
  }
  WriteRows<D>(p, r, w);
}

// The self-test of mma.cuh: one warp, C = A B through both B layouts.
__global__ void MmaTileKernel(const uint16_t* a, const uint16_t* b, float* c,
                              int shuffle_form) {
  constexpr int kP = 24;  // pitch: even, rows 16-byte apart x 3
  __shared__ uint16_t as[16 * kP], bk[16 * kP], bn[8 * kP];
  for (int i = threadIdx.x; i < 16 * 16; i += 32) {
    as[(i / 16) * kP + i % 16] = a[i];
  }
  for (int i = threadIdx.x; i < 16 * 8; i += 32) {  // b is B[k][n], row-major
    bk[(i / 8) * kP + i % 8] = b[i];
    bn[(i % 8) * kP + i / 8] = b[i];
  }
  __syncwarp();
  uint32_t fa[4], fb[2];
  float acc[2][4] = {};
  internal::LoadA(as, kP, fa);
  internal::LoadBKMajor(bk, kP, fb);
  internal::MmaBf16(acc[0], fa, fb, shuffle_form != 0);
  internal::LoadBNMajor(bn, kP, fb);
  internal::MmaBf16(acc[1], fa, fb, shuffle_form != 0);
  const int g = threadIdx.x >> 2, t = threadIdx.x & 3;
  for (int f = 0; f < 2; ++f) {
    float* cf = c + f * 128;
    cf[g * 8 + 2 * t] = acc[f][0];
    cf[g * 8 + 2 * t + 1] = acc[f][1];
    cf[(g + 8) * 8 + 2 * t] = acc[f][2];
    cf[(g + 8) * 8 + 2 * t + 1] = acc[f][3];
  }
}

template <int D, typename T>
cudaError_t EnsureSmem() {
  static std::atomic<uint64_t> done{0};
  return internal::EnsureSharedMemory(
      reinterpret_cast<const void*>(FlashPrefillKernel<D, T>),
      static_cast<int>(FlashCfg<D>::kSmemBytes), &done,
      "FlashPrefillAttention");
}

template <int D, typename T>
cudaError_t Launch(const FlashArgs& p, const AttentionBatch& batch,
                   int kv_heads, cudaStream_t stream) {
  if (cudaError_t e = EnsureSmem<D, T>(); e != cudaSuccess) return e;
  const int64_t tiles = CeilDiv(batch.max_q_len, kRows / p.hpb);
  const dim3 grid(static_cast<unsigned>(tiles),
                  static_cast<unsigned>(kv_heads * p.head_groups),
                  static_cast<unsigned>(batch.num_seqs));
  FlashPrefillKernel<D, T>
      <<<grid, kThreads, FlashCfg<D>::kSmemBytes, stream>>>(p);
  return internal::CheckLaunch("FlashPrefillAttention");
}

template <typename T>
cudaError_t LaunchFor(const FlashArgs& p, const AttentionBatch& batch,
                      int kv_heads, cudaStream_t stream) {
  if (p.head_dim <= 64) return Launch<64, T>(p, batch, kv_heads, stream);
  if (p.head_dim <= 128) return Launch<128, T>(p, batch, kv_heads, stream);
  return Launch<256, T>(p, batch, kv_heads, stream);
}

cudaError_t CheckFlashShape(const DeviceKvCache& kv,
                            const AttentionShape& shape, const float* q,
                            int64_t q_stride, const float* out,
                            int64_t out_stride, const AttentionBatch& batch) {
  const int hd = shape.head_dim;
  const int64_t width = static_cast<int64_t>(shape.num_heads) * hd;
  const bool exact = hd == 64 || hd == 128 || hd == 256;
  if (hd < 1 || hd > 256 || shape.num_kv_heads <= 0 || shape.num_heads <= 0 ||
      shape.num_heads % shape.num_kv_heads != 0 ||
      static_cast<int64_t>(shape.num_kv_heads) * hd != kv.kv_dim ||
      !(shape.scale >= 0.0f) || q == nullptr || out == nullptr ||
      q_stride < width || out_stride < width || batch.num_seqs > 65535 ||
      shape.num_kv_heads > 65535 ||
      (exact && kv.type == KvType::kBF16 && kv.page_stride_floats % 8 != 0)) {
    return internal::Fail(
        "FlashPrefillAttention: unsupported shape: %d heads, %d kv heads, "
        "head_dim %d (1..256), cache kv_dim %lld, page stride %lld, scale %g, "
        "q/out %p/%p strides %lld/%lld (>= %lld), %d seqs",
        shape.num_heads, shape.num_kv_heads, hd,
        static_cast<long long>(kv.kv_dim),
        static_cast<long long>(kv.page_stride_floats), shape.scale,
        static_cast<const void*>(q), static_cast<const void*>(out),
        static_cast<long long>(q_stride), static_cast<long long>(out_stride),
        static_cast<long long>(width), batch.num_seqs);
  }
  return cudaSuccess;
}

}  // namespace

namespace internal {
cudaError_t PrepareFlash() {
  for (cudaError_t e :
       {EnsureSmem<64, float>(), EnsureSmem<128, float>(),
        EnsureSmem<256, float>(), EnsureSmem<64, uint16_t>(),
        EnsureSmem<128, uint16_t>(), EnsureSmem<256, uint16_t>()}) {
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
}  // namespace internal

cudaError_t FlashPrefillAttention(const DeviceKvCache& kv, int64_t layer,
                                  const AttentionBatch& batch,
                                  const AttentionShape& shape, const float* q,
                                  int64_t q_stride, float* out,
                                  int64_t out_stride, cudaStream_t stream) {
  FlashArgs p;
  if (cudaError_t e = internal::MakeViews(kv, layer, batch,
                                          "FlashPrefillAttention", &p.g, &p.b);
      e != cudaSuccess) {
    return e;
  }
  if (cudaError_t e =
          CheckFlashShape(kv, shape, q, q_stride, out, out_stride, batch);
      e != cudaSuccess) {
    return e;
  }
  if (batch.num_seqs == 0 || batch.max_q_len == 0) return cudaSuccess;
  p.q = q;
  p.qs = q_stride;
  p.out = out;
  p.os = out_stride;
  p.group = shape.num_heads / shape.num_kv_heads;
  p.hpb = p.group < kRows ? p.group : kRows;
  p.head_groups = static_cast<int>(CeilDiv(p.group, p.hpb));
  p.head_dim = shape.head_dim;
  const float scale =
      shape.scale > 0.0f ? shape.scale
                         : 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  p.scale_log2 = scale * kLog2e;
  if (static_cast<int64_t>(shape.num_kv_heads) * p.head_groups > 65535) {
    return internal::Fail("FlashPrefillAttention: %d kv heads x %d too many",
                          shape.num_kv_heads, p.head_groups);
  }
  return kv.type == KvType::kBF16
             ? LaunchFor<uint16_t>(p, batch, shape.num_kv_heads, stream)
             : LaunchFor<float>(p, batch, shape.num_kv_heads, stream);
}

cudaError_t MmaBf16Tile(const uint16_t* a, const uint16_t* b, float* c,
                        bool shuffle_form, cudaStream_t stream) {
  if (a == nullptr || b == nullptr || c == nullptr) {
    return internal::Fail("MmaBf16Tile: null pointer");
  }
  MmaTileKernel<<<1, 32, 0, stream>>>(a, b, c, shuffle_form ? 1 : 0);
  return internal::CheckLaunch("MmaBf16Tile");
}

}  // namespace cuda
}  // namespace pdserve
