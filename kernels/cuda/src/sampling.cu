// Device sampling: one 1024-thread block per logits row. Greedy argmax and
// the log-softmax of the raw logits; temperature sampling with top-k, top-p
// and min-p filters found by radix selection over the probabilities' bit
// patterns (4 passes of 8 bits, integer histograms, so every run gives the
// same result), then one draw with Philox4x32-10 keyed by (seed, step).
//
// Probabilities w_i = exp((x_i - max) / T) in (0, 1] are ranked by value
// descending, ties by id ascending (the CPU Sampler's order). A filter keeps
// a prefix of that order, described by (tau, cut): key > tau, or key == tau
// and id < cut. Masses are fixed point (w * 2^40, u64), so sums are exact and
// order-independent; tokens with w < 2^-40 have zero mass and are never
// drawn.
#include <cfloat>
#include <climits>

#include "kernels/cuda/src/common.cuh"

namespace pdserve {
namespace cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBuckets = 256;
constexpr float kMassScale = 1099511627776.0f;  // 2^40

struct Prefix {  // a prefix of the rank order
  uint32_t tau = 0;
  int32_t cut = INT_MAX;
};

struct Smem {
  unsigned long long hist[kWarps][kBuckets];
  unsigned long long total[kBuckets];
  unsigned long long red[kWarps];
  float redf[kWarps][3];
  int32_t redi[kWarps];
  uint32_t word;
  unsigned long long need;
  int32_t token;
};

__device__ __forceinline__ bool InPrefix(uint32_t key, int32_t i,
                                         const Prefix& p) {
  return key > p.tau || (key == p.tau && i < p.cut);
}

struct Row {
  const float* x;
  int32_t vocab;
  float max;
  float inv_t;
  float min_p;
  Prefix k, p;  // top-k and top-p prefixes (all-inclusive when off)

  __device__ float W(int32_t i) const {
    const float w = expf((x[i] - max) * inv_t);
    return w >= 0.0f ? w : 0.0f;  // NaN -> 0
  }
  __device__ static uint32_t Key(float w) { return __float_as_uint(w); }
  __device__ static unsigned long long Mass(float w) {
    return __float2ull_rd(w * kMassScale);
  }
  __device__ bool Kept(int32_t i, float w) const {
    const uint32_t key = Key(w);
    return InPrefix(key, i, k) && InPrefix(key, i, p) && w >= min_p;
  }
};

__device__ unsigned long long BlockSumU64(unsigned long long v, Smem& sm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) sm.red[warp] = v;
  __syncthreads();
  v = lane < kWarps ? sm.red[lane] : 0ull;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Weight of element i for a selection: 1 (count) or its mass, among the
// candidates (inside `within`).
__device__ __forceinline__ unsigned long long SelWeight(const Row& r, int32_t i,
                                                        float w, bool by_mass,
                                                        const Prefix& within) {
  if (!InPrefix(Row::Key(w), i, within)) return 0ull;
  return by_mass ? Row::Mass(w) : 1ull;
}

// The shortest prefix (in rank order) of the candidates inside `within`
// whose weight reaches `need` (1 <= need <= their total weight).
__device__ Prefix Select(const Row& r, bool by_mass, const Prefix& within,
                         unsigned long long need, Smem& sm) {
  const int warp = threadIdx.x >> 5;
  uint32_t prefix = 0;
  unsigned long long tie_weight = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < kWarps * kBuckets; i += kThreads) {
      (&sm.hist[0][0])[i] = 0ull;
    }
    __syncthreads();
    const uint32_t hi_mask = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
    for (int32_t i = threadIdx.x; i < r.vocab; i += kThreads) {
      const float w = r.W(i);
      const uint32_t key = Row::Key(w);
      if ((key & hi_mask) != (prefix & hi_mask)) continue;
      const unsigned long long wt = SelWeight(r, i, w, by_mass, within);
      if (wt == 0) continue;
      atomicAdd(&sm.hist[warp][(key >> shift) & 255u], wt);
    }
    __syncthreads();
    if (threadIdx.x < kBuckets) {
      unsigned long long s = 0;
      for (int w = 0; w < kWarps; ++w) s += sm.hist[w][threadIdx.x];
      sm.total[threadIdx.x] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long acc = 0;
      int d = 255;
      for (; d > 0; --d) {
        if (acc + sm.total[d] >= need) break;
        acc += sm.total[d];
      }
      sm.word = prefix | (static_cast<uint32_t>(d) << shift);
      sm.need = need - acc;
      sm.red[0] = sm.total[d];
    }
    __syncthreads();
    prefix = sm.word;
    need = sm.need;
    tie_weight = sm.red[0];
    __syncthreads();
  }
  Prefix out;
  out.tau = prefix;
  out.cut = INT_MAX;
  // Ties at tau beyond what is needed: find the id cut (rare; skipped for
  // zero probabilities, which are never drawn).
  if (need < tie_weight && prefix != 0) {
    int32_t lo = 0, hi = r.vocab;
    while (lo < hi) {
      const int32_t mid = lo + (hi - lo) / 2;
      unsigned long long s = 0;
      for (int32_t i = threadIdx.x; i < mid; i += kThreads) {
        const float w = r.W(i);
        if (Row::Key(w) == prefix) s += SelWeight(r, i, w, by_mass, within);
      }
      s = BlockSumU64(s, sm);
      if (s >= need) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    out.cut = lo;
  }
  return out;
}

__device__ uint2 Philox(uint64_t seed, uint64_t step) {
  uint32_t k0 = static_cast<uint32_t>(seed),
           k1 = static_cast<uint32_t>(seed >> 32);
  uint32_t c0 = static_cast<uint32_t>(step),
           c1 = static_cast<uint32_t>(step >> 32);
  uint32_t c2 = 0, c3 = 0;
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const uint32_t lo0 = 0xD2511F53u * c0, hi0 = __umulhi(0xD2511F53u, c0);
    const uint32_t lo1 = 0xCD9E8D57u * c2, hi1 = __umulhi(0xCD9E8D57u, c2);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return make_uint2(c0, c1);
}

// Token drawn from the kept set in id order; each thread scans a contiguous
// chunk of ids.
__device__ int32_t Draw(const Row& r, uint64_t seed, uint64_t step, Smem& sm) {
  const int32_t chunk = (r.vocab + kThreads - 1) / kThreads;
  const int32_t b =
      static_cast<int32_t>(min(static_cast<int64_t>(r.vocab),
                               static_cast<int64_t>(threadIdx.x) * chunk));
  const int32_t e = static_cast<int32_t>(
      min(static_cast<int64_t>(r.vocab), static_cast<int64_t>(b) + chunk));
  unsigned long long own = 0;
  for (int32_t i = b; i < e; ++i) {
    const float w = r.W(i);
    if (r.Kept(i, w)) own += Row::Mass(w);
  }
  // Exclusive scan over threads.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned long long incl = own;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  __syncthreads();
  if (lane == 31) sm.red[warp] = incl;
  if (threadIdx.x == 0) sm.token = -1;
  __syncthreads();
  unsigned long long before = 0, total = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before += sm.red[w];
    total += sm.red[w];
  }
  const unsigned long long excl = before + incl - own;
  const uint2 bits = Philox(seed, step);
  const double u = (static_cast<double>(bits.x >> 5) * 67108864.0 +
                    static_cast<double>(bits.y >> 6)) *
                   (1.0 / 9007199254740992.0);
  unsigned long long target =
      static_cast<unsigned long long>(u * static_cast<double>(total));
  if (target >= total) target = total - 1;
  if (own > 0 && target >= excl && target < excl + own) {
    unsigned long long acc = excl;
    for (int32_t i = b; i < e; ++i) {
      const float w = r.W(i);
      if (!r.Kept(i, w)) continue;
      acc += Row::Mass(w);
      if (acc > target) {
        sm.token = i;
        break;
      }
    }
  }
  __syncthreads();
  return sm.token;
}

__global__ void __launch_bounds__(kThreads)
    SampleKernel(const float* logits, int32_t vocab, int64_t stride,
                 const SampleParams* params, int32_t* tokens, float* logprobs) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const float* x = logits + blockIdx.x * stride;
  const SampleParams prm = params[blockIdx.x];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  // Max (argmax: lowest id) and sum of exp(x - max).
  float m = -INFINITY, s = 0.0f;
  int32_t arg = INT_MAX;
  for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = x[i];
    if (v > m) {
      s = (m == -INFINITY ? 0.0f : s * expf(m - v)) + 1.0f;
      m = v;
      arg = i;
    } else if (v > -INFINITY) {  // v <= m, not NaN
      s += expf(v - m);
    }
  }
  auto merge = [](float& m1, float& s1, int32_t& a1, float m2, float s2,
                  int32_t a2) {
    if (m2 > m1 || (m2 == m1 && a2 < a1)) {
      const float s_old = m1 == -INFINITY ? 0.0f : s1 * expf(m1 - m2);
      s1 = s2 + s_old;
      m1 = m2;
      a1 = a2;
    } else if (m2 > -INFINITY) {
      s1 += m2 == m1 ? s2 : s2 * expf(m2 - m1);
    }
  };
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    const int32_t a2 = __shfl_xor_sync(0xffffffffu, arg, o);
    merge(m, s, arg, m2, s2, a2);
  }
  if (lane == 0) {
    sm.redf[warp][0] = m;
    sm.redf[warp][1] = s;
    sm.redi[warp] = arg;
  }
  __syncthreads();
  m = sm.redf[0][0];
  s = sm.redf[0][1];
  arg = sm.redi[0];
  for (int w = 1; w < kWarps; ++w) {
    merge(m, s, arg, sm.redf[w][0], sm.redf[w][1], sm.redi[w]);
  }
  if (arg == INT_MAX) arg = 0;  // every logit NaN
  const float lse = m + logf(s);

  const bool valid = prm.temperature > 0.0f && prm.temperature < INFINITY &&
                     prm.top_k >= 0 && prm.top_p > 0.0f && prm.top_p <= 1.0f &&
                     prm.min_p >= 0.0f && prm.min_p <= 1.0f && m > -INFINITY &&
                     m < INFINITY;
  int32_t token = arg;
  if (valid) {
    Row r;
    r.x = x;
    r.vocab = vocab;
    r.max = m;
    r.inv_t = 1.0f / prm.temperature;
    r.min_p = prm.min_p;
    const Prefix all;
    if (prm.top_k > 0 && prm.top_k < vocab) {
      r.k =
          Select(r, false, all, static_cast<unsigned long long>(prm.top_k), sm);
    }
    if (prm.top_p < 1.0f) {
      unsigned long long t = 0;
      for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
        const float w = r.W(i);
        if (InPrefix(Row::Key(w), i, r.k)) t += Row::Mass(w);
      }
      t = BlockSumU64(t, sm);
      unsigned long long need = static_cast<unsigned long long>(
          ceil(static_cast<double>(prm.top_p) * static_cast<double>(t)));
      if (need < 1) need = 1;
      if (need > t) need = t;
      r.p = Select(r, true, r.k, need, sm);
    }
    token = Draw(r, prm.seed, prm.step, sm);
    if (token < 0) token = arg;  // cannot happen: the max is always kept
  }
  if (threadIdx.x == 0) {
    tokens[blockIdx.x] = token;
    if (logprobs != nullptr) logprobs[blockIdx.x] = x[token] - lse;
  }
}

}  // namespace

namespace internal {
cudaError_t PrepareSampling() {
  static std::atomic<uint64_t> done{0};
  return EnsureSharedMemory(reinterpret_cast<const void*>(SampleKernel),
                            static_cast<int>(sizeof(Smem)), &done,
                            "SampleRows");
}
}  // namespace internal

cudaError_t SampleRows(const float* logits, int64_t rows, int64_t vocab,
                       int64_t stride, const SampleParams* params,
                       int32_t* tokens, float* logprobs, cudaStream_t stream) {
  if (logits == nullptr || params == nullptr || tokens == nullptr || rows < 0 ||
      rows > 0x7fffffff || vocab < 1 || vocab > (1 << 30) ||
      (rows > 1 && stride < vocab)) {
    return internal::Fail(
        "SampleRows: %lld rows of vocab %lld, stride %lld, "
        "or a null pointer",
        static_cast<long long>(rows), static_cast<long long>(vocab),
        static_cast<long long>(stride));
  }
  if (rows == 0) return cudaSuccess;
  if (cudaError_t e = internal::PrepareSampling(); e != cudaSuccess) {
    return e;
  }
  SampleKernel<<<static_cast<unsigned>(rows), kThreads, sizeof(Smem), stream>>>(
      logits, static_cast<int32_t>(vocab), stride, params, tokens, logprobs);
  return internal::CheckLaunch("SampleRows");
}

}  // namespace cuda
}  // namespace pdserve
