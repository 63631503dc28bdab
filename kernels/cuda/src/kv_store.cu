// StoreKv and the attention launchers' shared host-side validation.
#include <cmath>

#include "kernels/cuda/src/attention.cuh"

namespace pdserve {
namespace cuda {
namespace internal {

cudaError_t MakeViews(const DeviceKvCache& kv, int64_t layer,
                      const AttentionBatch& batch, const char* what, KvGeom* g,
                      BatchView* b) {
  if (kv.data == nullptr || kv.num_layers <= 0 || kv.kv_dim <= 0 ||
      kv.page_size <= 0 || kv.num_pages <= 0 || kv.kv_dim > 0x7fffffff ||
      kv.page_size > 0x7fffffff || kv.num_pages > 0x7fffffff ||
      kv.page_stride_floats < kv.num_layers * 2 * kv.page_size * kv.kv_dim ||
      kv.page_stride_floats % 4 != 0 || kv.kv_dim % 4 != 0 ||
      !Aligned(kv.data, 16)) {
    return Fail(
        "%s: bad KV cache (data %p, %lld layers, kv_dim %lld "
        "(multiple of 4), page_size %lld, %lld pages, page stride "
        "%lld floats (multiple of 4, >= layers*2*page_size*kv_dim))",
        what, static_cast<void*>(kv.data),
        static_cast<long long>(kv.num_layers),
        static_cast<long long>(kv.kv_dim), static_cast<long long>(kv.page_size),
        static_cast<long long>(kv.num_pages),
        static_cast<long long>(kv.page_stride_floats));
  }
  if (layer < 0 || layer >= kv.num_layers) {
    return Fail("%s: layer %lld outside [0, %lld)", what,
                static_cast<long long>(layer),
                static_cast<long long>(kv.num_layers));
  }
  if (batch.num_seqs < 0 || batch.max_q_len < 0 || batch.max_kv_len < 0 ||
      batch.total_rows < 0 ||
      (batch.num_seqs > 0 &&
       (batch.q_start == nullptr || batch.start_pos == nullptr ||
        batch.page_start == nullptr || batch.page_table == nullptr))) {
    return Fail(
        "%s: bad batch (%d seqs, max_q_len %d, max_kv_len %d, "
        "total_rows %d, or a null array)",
        what, batch.num_seqs, batch.max_q_len, batch.max_kv_len,
        batch.total_rows);
  }
  g->data = kv.data;
  g->page_stride = kv.page_stride_floats;
  g->plane = kv.page_size * kv.kv_dim;
  g->layer_offset = layer * 2 * g->plane;
  g->kv_dim = static_cast<int32_t>(kv.kv_dim);
  g->page_size = static_cast<int32_t>(kv.page_size);
  g->num_pages = static_cast<int32_t>(kv.num_pages);
  b->q_start = batch.q_start;
  b->start_pos = batch.start_pos;
  b->page_start = batch.page_start;
  b->page_table = batch.page_table;
  b->num_seqs = batch.num_seqs;
  return cudaSuccess;
}

cudaError_t CheckShape(const DeviceKvCache& kv, const AttentionShape& shape,
                       const char* what, float* scale) {
  const int hd = shape.head_dim;
  if ((hd != 64 && hd != 128 && hd != 256) || shape.num_kv_heads <= 0 ||
      shape.num_heads <= 0 || shape.num_heads % shape.num_kv_heads != 0 ||
      static_cast<int64_t>(shape.num_kv_heads) * hd != kv.kv_dim ||
      !(shape.scale >= 0.0f)) {
    return Fail(
        "%s: unsupported shape: %d heads, %d kv heads, head_dim %d "
        "(64, 128 or 256), cache kv_dim %lld, scale %g",
        what, shape.num_heads, shape.num_kv_heads, hd,
        static_cast<long long>(kv.kv_dim), shape.scale);
  }
  *scale = shape.scale > 0.0f ? shape.scale
                              : 1.0f / std::sqrt(static_cast<float>(hd));
  return cudaSuccess;
}

}  // namespace internal

namespace {

// One block per new row: finds the row's sequence, then copies kv_dim
// floats of k and v into the slot (converted to the cache's type).
template <typename T>
__global__ void StoreKvKernel(internal::KvGeom g, internal::BatchView b,
                              const float* k, int64_t ks, const float* v,
                              int64_t vs) {
  const int row = blockIdx.x;
  __shared__ int64_t offset;
  if (threadIdx.x == 0) {
    int lo = 0, hi = b.num_seqs - 1, s = -1;
    while (lo <= hi) {  // last s with q_start[s] <= row
      const int mid = (lo + hi) / 2;
      if (b.q_start[mid] <= row) {
        s = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    offset = -1;
    if (s >= 0 && row < b.q_start[s + 1]) {
      const int64_t pos = b.start_pos[s] + (row - b.q_start[s]);
      offset = internal::SlotOffset(g, b, s, pos);
    }
  }
  __syncthreads();
  if (offset < 0) return;
  const float* kr = k + row * ks;
  const float* vr = v + row * vs;
  for (int i = threadIdx.x; i < g.kv_dim; i += blockDim.x) {
    internal::KvIo<T>::Store(g.data, offset + i, kr[i]);
    internal::KvIo<T>::Store(g.data, offset + g.plane + i, vr[i]);
  }
}

}  // namespace

cudaError_t StoreKv(const DeviceKvCache& kv, int64_t layer,
                    const AttentionBatch& batch, const float* k,
                    int64_t k_stride, const float* v, int64_t v_stride,
                    cudaStream_t stream) {
  internal::KvGeom g;
  internal::BatchView b;
  if (cudaError_t e = internal::MakeViews(kv, layer, batch, "StoreKv", &g, &b);
      e != cudaSuccess) {
    return e;
  }
  if (k == nullptr || v == nullptr || k_stride < kv.kv_dim ||
      v_stride < kv.kv_dim) {
    return internal::Fail(
        "StoreKv: k/v null or strides %lld/%lld < kv_dim "
        "%lld",
        static_cast<long long>(k_stride), static_cast<long long>(v_stride),
        static_cast<long long>(kv.kv_dim));
  }
  if (batch.total_rows == 0 || batch.num_seqs == 0) return cudaSuccess;
  if (kv.type == KvType::kBF16) {
    StoreKvKernel<uint16_t>
        <<<static_cast<unsigned>(batch.total_rows), 128, 0, stream>>>(
            g, b, k, k_stride, v, v_stride);
  } else {
    StoreKvKernel<float>
        <<<static_cast<unsigned>(batch.total_rows), 128, 0, stream>>>(
            g, b, k, k_stride, v, v_stride);
  }
  return internal::CheckLaunch("StoreKv");
}

}  // namespace cuda
}  // namespace pdserve
