// Paged key/value storage for the full-attention layers (host memory, f32).
#ifndef PDSERVE_ENGINE_KV_KV_STORAGE_H_
#define PDSERVE_ENGINE_KV_KV_STORAGE_H_

#include <cstdint>
#include <vector>

namespace pdserve {

// Storage for `num_pages` pages; a page holds `page_size` consecutive token
// positions of one sequence for every layer. Layout (floats):
//   [page][layer][0 = key, 1 = value][slot < page_size][kv_dim]
// so one page of one layer's keys is a contiguous [page_size][kv_dim] block.
// This class only owns memory; which sequence owns which page is decided by
// the KV pool. Not thread-safe for concurrent writes to the same page.
class KvStorage {
 public:
  KvStorage(int64_t num_layers, int64_t kv_dim, int64_t page_size,
            int64_t num_pages)
      : num_layers_(num_layers),
        kv_dim_(kv_dim),
        page_size_(page_size),
        num_pages_(num_pages),
        data_(static_cast<size_t>(num_pages * num_layers * 2 * page_size *
                                  kv_dim)) {}

  int64_t num_layers() const { return num_layers_; }
  int64_t kv_dim() const { return kv_dim_; }
  int64_t page_size() const { return page_size_; }
  int64_t num_pages() const { return num_pages_; }
  // Bytes one token occupies in one layer (key + value).
  int64_t bytes_per_token_per_layer() const { return 2 * kv_dim_ * 4; }
  int64_t bytes_per_page() const {
    return num_layers_ * 2 * page_size_ * kv_dim_ * 4;
  }

  // [page_size][kv_dim] keys of `layer` in `page`.
  float* keys(int64_t page, int64_t layer) {
    return data_.data() + Offset(page, layer, 0);
  }
  float* values(int64_t page, int64_t layer) {
    return data_.data() + Offset(page, layer, 1);
  }
  const float* keys(int64_t page, int64_t layer) const {
    return data_.data() + Offset(page, layer, 0);
  }
  const float* values(int64_t page, int64_t layer) const {
    return data_.data() + Offset(page, layer, 1);
  }

 private:
  size_t Offset(int64_t page, int64_t layer, int kv) const {
    return static_cast<size_t>(((page * num_layers_ + layer) * 2 + kv) *
                               page_size_ * kv_dim_);
  }
  int64_t num_layers_, kv_dim_, page_size_, num_pages_;
  std::vector<float> data_;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_KV_KV_STORAGE_H_
