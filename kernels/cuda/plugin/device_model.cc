#include "kernels/cuda/plugin/device_model.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/plugin/cuda_check.h"

namespace pdserve::cuda_runner {
namespace {

constexpr int64_t kAlign = 256;

bool IsQuantizedType(cuda::WType t) {
  return t == cuda::WType::kQ8_0 || t == cuda::WType::kQ4_0 ||
         t == cuda::WType::kQ4_1;
}

// Round-to-nearest-even f32 -> bf16 (NaN stays NaN).
uint16_t ToBf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

// One tensor to copy: a matrix (view != nullptr) or an f32 vector.
struct Item {
  const WeightView* view = nullptr;
  cuda::DeviceMatrix* out = nullptr;
  const float* vec = nullptr;
  int64_t vec_len = 0;
  const float** vec_out = nullptr;
  DType dev_type = DType::kF32;
  int64_t dev_row_bytes = 0;
  int64_t offset = 0;
  int64_t bytes = 0;
  bool follows_prev = false;  // placed right after the previous item
};

absl::Status CopyMatrix(const Item& it, uint8_t* base) {
  const WeightView& w = *it.view;
  uint8_t* dst = base + it.offset;
  if (it.dev_type == w.type) {
    PDSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpy2D(
        dst, it.dev_row_bytes, w.data, w.row_bytes,
        static_cast<size_t>(std::min(w.row_bytes, it.dev_row_bytes)), w.rows,
        cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }
  // f32 -> bf16, a block of rows at a time through host memory.
  const int64_t rows_per_block = std::max<int64_t>(
      1, (int64_t{64} << 20) / std::max<int64_t>(1, it.dev_row_bytes));
  std::vector<uint16_t> host(static_cast<size_t>(
      std::min(rows_per_block, w.rows) * it.dev_row_bytes / 2));
  for (int64_t r0 = 0; r0 < w.rows; r0 += rows_per_block) {
    const int64_t n = std::min(rows_per_block, w.rows - r0);
    for (int64_t r = 0; r < n; ++r) {
      const auto* src = reinterpret_cast<const float*>(w.row(r0 + r));
      uint16_t* d = host.data() + r * it.dev_row_bytes / 2;
      for (int64_t c = 0; c < w.cols; ++c) d[c] = ToBf16(src[c]);
    }
    PDSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst + r0 * it.dev_row_bytes,
                                            host.data(), n * it.dev_row_bytes,
                                            cudaMemcpyHostToDevice));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t DeviceRowBytes(DType type, int64_t cols, int64_t host_row_bytes) {
  return host_row_bytes;
}

absl::StatusOr<std::unique_ptr<DeviceModel>> DeviceModel::Upload(
    const ModelWeights& w, bool f32_to_bf16) {
  const ModelConfig& c = w.config;
  std::unique_ptr<DeviceModel> m(new DeviceModel());
  m->layers.resize(w.layers.size());
  std::vector<Item> items;
  std::vector<bool> fused;  // per layer: qkv, gate_up
  auto add_matrix = [&](const WeightView& v, cuda::DeviceMatrix* out,
                        bool follows_prev = false) {
    Item it;
    it.view = &v;
    it.out = out;
    it.dev_type =
        (f32_to_bf16 && v.type == DType::kF32) ? DType::kBF16 : v.type;
    it.dev_row_bytes = it.dev_type == v.type
                           ? DeviceRowBytes(v.type, v.cols, v.row_bytes)
                           : v.cols * 2;
    it.bytes = it.dev_row_bytes * v.rows;
    if (follows_prev && !items.empty()) {
      const Item& prev = items.back();
      it.follows_prev = prev.view != nullptr && prev.dev_type == it.dev_type &&
                        prev.dev_row_bytes == it.dev_row_bytes &&
                        prev.view->cols == v.cols;
    }
    items.push_back(it);
    return it.follows_prev;
  };
  auto add_vec = [&](const float* v, int64_t n, const float** out) {
    if (v == nullptr) return;
    Item it;
    it.vec = v;
    it.vec_len = n;
    it.vec_out = out;
    it.bytes = n * 4;
    items.push_back(it);
  };
  add_matrix(w.token_embedding, &m->embedding);
  const bool tied = w.lm_head.data == w.token_embedding.data;
  if (!tied) add_matrix(w.lm_head, &m->lm_head);
  add_vec(w.output_norm, c.hidden_size, &m->output_norm);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    DeviceLayer& d = m->layers[l];
    for (const WeightView* v :
         {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down}) {
      if (v->empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "model ", c.name, ": layer ", l, " lacks a dense weight matrix"));
      }
    }
    add_matrix(lw.wq, &d.wq);
    const bool qk = add_matrix(lw.wk, &d.wk, true);
    const bool kv = add_matrix(lw.wv, &d.wv, true);
    fused.push_back(qk && kv);
    add_matrix(lw.wo, &d.wo);
    add_matrix(lw.w_gate, &d.w_gate);
    fused.push_back(add_matrix(lw.w_up, &d.w_up, true));
    add_matrix(lw.w_down, &d.w_down);
    add_vec(lw.attn_norm, c.hidden_size, &d.attn_norm);
    add_vec(lw.ffn_norm, c.hidden_size, &d.ffn_norm);
    if (c.qk_norm) {
      add_vec(lw.q_norm, c.head_dim, &d.q_norm);
      add_vec(lw.k_norm, c.head_dim, &d.k_norm);
    }
  }
  int64_t total = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    Item& it = items[i];
    it.offset = it.follows_prev ? items[i - 1].offset + items[i - 1].bytes
                                : AlignUp(total, kAlign);
    total = it.offset + it.bytes;
  }
  total = AlignUp(total, kAlign);
  cudaError_t e = cudaMalloc(&m->arena_, std::max<int64_t>(total, kAlign));
  if (e != cudaSuccess) {
    m->arena_ = nullptr;
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", total,
                     " bytes of device memory for the weights of ", c.name,
                     ": ", cudaGetErrorString(e)));
  }
  m->device_bytes = total;
  auto* base = static_cast<uint8_t*>(m->arena_);
  for (const Item& it : items) {
    if (it.vec != nullptr) {
      PDSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpy(
          base + it.offset, it.vec, it.bytes, cudaMemcpyHostToDevice));
      *it.vec_out = reinterpret_cast<const float*>(base + it.offset);
      continue;
    }
    PDSERVE_RETURN_IF_ERROR(CopyMatrix(it, base));
    it.out->type = static_cast<cuda::WType>(it.dev_type);
    it.out->rows = it.view->rows;
    it.out->cols = it.view->cols;
    it.out->row_bytes = it.dev_row_bytes;
    it.out->data = base + it.offset;
  }
  if (tied) m->lm_head = m->embedding;
  for (size_t l = 0; l < m->layers.size(); ++l) {
    DeviceLayer& d = m->layers[l];
    if (fused[2 * l]) {
      d.wqkv = d.wq;
      d.wqkv.rows = d.wq.rows + d.wk.rows + d.wv.rows;
    }
    if (fused[2 * l + 1]) {
      d.w_gate_up = d.w_gate;
      d.w_gate_up.rows = d.w_gate.rows + d.w_up.rows;
    }
  }
  // Pageable-memory copies may still be in flight on the legacy stream,
  // which the runner's non-blocking streams do not wait for.
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());

  // Work accounting (as ForwardPass, with the uploaded types' bytes).
  auto payload = [](const cuda::DeviceMatrix& d, const WeightView& h) {
    return d.type == static_cast<cuda::WType>(h.type) ? h.rows * h.row_bytes
                                                      : d.rows * d.row_bytes;
  };
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    const DeviceLayer& d = m->layers[l];
    for (auto [h, dm] : {std::pair{&lw.wq, &d.wq},
                         {&lw.wk, &d.wk},
                         {&lw.wv, &d.wv},
                         {&lw.wo, &d.wo},
                         {&lw.w_gate, &d.w_gate},
                         {&lw.w_up, &d.w_up},
                         {&lw.w_down, &d.w_down}}) {
      m->layer_bytes += payload(*dm, *h);
      m->layer_macs += h->rows * h->cols;
      if (IsQuantizedType(dm->type)) {
        m->layer_quantized_bytes += payload(*dm, *h);
        m->layer_quantized_elems += h->rows * h->cols;
      }
      m->max_matrix_elems = std::max(m->max_matrix_elems, h->rows * h->cols);
      m->max_in_features = std::max(m->max_in_features, h->cols);
    }
    m->layer_bytes +=
        (2 * c.hidden_size + (c.qk_norm ? 2 * c.head_dim : 0)) * 4;
  }
  m->layer_bytes += c.hidden_size * 4;
  m->lm_head_bytes = payload(m->lm_head, w.lm_head);
  m->max_matrix_elems =
      std::max(m->max_matrix_elems, w.lm_head.rows * w.lm_head.cols);
  m->max_in_features = std::max(m->max_in_features, w.lm_head.cols);
  for (const DeviceLayer& d : m->layers) {  // fused matrices are larger
    for (const cuda::DeviceMatrix* f : {&d.wqkv, &d.w_gate_up}) {
      if (f->data != nullptr) {
        m->max_matrix_elems = std::max(m->max_matrix_elems, f->rows * f->cols);
      }
    }
  }
  return m;
}

std::vector<const cuda::DeviceMatrix*> DeviceModel::QuantizedGemmMatrices()
    const {
  std::vector<const cuda::DeviceMatrix*> out;
  auto add = [&out](const cuda::DeviceMatrix& m) {
    if (IsQuantizedType(m.type) && m.data != nullptr) out.push_back(&m);
  };
  for (const DeviceLayer& l : layers) {
    if (l.wqkv.data != nullptr) {
      add(l.wqkv);
    } else {
      add(l.wq);
      add(l.wk);
      add(l.wv);
    }
    add(l.wo);
    if (l.w_gate_up.data != nullptr) {
      add(l.w_gate_up);
    } else {
      add(l.w_gate);
      add(l.w_up);
    }
    add(l.w_down);
  }
  add(lm_head);
  return out;
}

int64_t DeviceModel::QuantizedGemmCopyBytes() const {
  int64_t bytes = 0;
  for (const cuda::DeviceMatrix* m : QuantizedGemmMatrices()) {
    bytes += AlignUp(m->rows * m->cols * 2, kAlign);
  }
  return bytes;
}

absl::Status DeviceModel::ConvertQuantizedForGemm(cudaStream_t stream) {
  if (gemm_arena_ != nullptr) return absl::OkStatus();
  const int64_t total = QuantizedGemmCopyBytes();
  if (total == 0) return absl::OkStatus();
  if (cudaMalloc(&gemm_arena_, total) != cudaSuccess) {
    cudaGetLastError();
    gemm_arena_ = nullptr;
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", total,
        " bytes of device memory for the bf16 copies of the quantized "
        "weights (PDSERVE_CUDA_QUANT_GEMM=per_step dequantizes per product "
        "instead)"));
  }
  auto* dst = static_cast<uint8_t*>(gemm_arena_);
  for (const cuda::DeviceMatrix* m : QuantizedGemmMatrices()) {
    PDSERVE_CUDA_RETURN_IF_ERROR(
        cuda::DequantizeToHalf(*m, cuda::HalfType::kBF16, dst, stream));
    cuda::DeviceMatrix h;
    h.type = cuda::WType::kBF16;
    h.rows = m->rows;
    h.cols = m->cols;
    h.row_bytes = m->cols * 2;
    h.data = dst;
    gemm_copies_[m->data] = h;
    dst += AlignUp(m->rows * m->cols * 2, kAlign);
  }
  device_bytes += total;
  return absl::OkStatus();
}

cuda::DeviceMatrix DeviceModel::GemmCopy(const cuda::DeviceMatrix& w) const {
  auto it = gemm_copies_.find(w.data);
  if (it == gemm_copies_.end() || it->second.cols != w.cols ||
      it->second.rows < w.rows) {
    return cuda::DeviceMatrix{};
  }
  cuda::DeviceMatrix h = it->second;
  h.rows = w.rows;
  return h;
}

DeviceModel::~DeviceModel() {
  if (gemm_arena_ != nullptr) cudaFree(gemm_arena_);
  if (arena_ != nullptr) cudaFree(arena_);
}

}  // namespace pdserve::cuda_runner
