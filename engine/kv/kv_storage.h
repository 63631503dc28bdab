// Paged key/value storage for the full-attention layers (host memory, f32).
#ifndef PDSERVE_ENGINE_KV_KV_STORAGE_H_
#define PDSERVE_ENGINE_KV_KV_STORAGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace pdserve {

// Storage for `num_pages` pages; a page holds `page_size` consecutive token
// positions of one sequence for every layer. Layout (floats):
//   [page][layer][0 = key, 1 = value][slot < page_size][kv_dim]
// so one page of one layer's keys is a contiguous [page_size][kv_dim] block.
// Pages are `page_stride_floats()` apart, a multiple of the OS page size, so
// a page's memory can be returned to the OS on its own (ReleasePage).
//
// The memory is one anonymous MAP_NORESERVE mapping: pages cost physical
// memory only once written, and read as zeros until then. This class only
// owns memory; which sequence owns which page is decided by the KV pool.
// Not thread-safe for concurrent writes to the same page.
class KvStorage {
 public:
  // Maps the storage; RESOURCE_EXHAUSTED names the bytes when mmap fails,
  // INVALID_ARGUMENT for non-positive dimensions.
  static absl::StatusOr<std::unique_ptr<KvStorage>> Create(
      int64_t num_layers, int64_t kv_dim, int64_t page_size,
      int64_t num_pages);
  // Same, aborting the process when the mapping fails (tests, small pools).
  KvStorage(int64_t num_layers, int64_t kv_dim, int64_t page_size,
            int64_t num_pages);
  ~KvStorage();
  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;

  int64_t num_layers() const { return num_layers_; }
  int64_t kv_dim() const { return kv_dim_; }
  int64_t page_size() const { return page_size_; }
  int64_t num_pages() const { return num_pages_; }
  // Bytes one token occupies in one layer (key + value).
  int64_t bytes_per_token_per_layer() const { return 2 * kv_dim_ * 4; }
  // Bytes of data in one page (all layers).
  int64_t bytes_per_page() const {
    return num_layers_ * 2 * page_size_ * kv_dim_ * 4;
  }
  // Distance between pages, in floats (bytes_per_page rounded up to the OS
  // page size).
  int64_t page_stride_floats() const { return page_stride_floats_; }
  // Length of the mapping in bytes.
  size_t mapped_bytes() const { return mapped_bytes_; }
  const void* mapping() const { return data_; }

  // [page_size][kv_dim] keys of `layer` in `page`.
  float* keys(int64_t page, int64_t layer) {
    return data_ + Offset(page, layer, 0);
  }
  float* values(int64_t page, int64_t layer) {
    return data_ + Offset(page, layer, 1);
  }
  const float* keys(int64_t page, int64_t layer) const {
    return data_ + Offset(page, layer, 0);
  }
  const float* values(int64_t page, int64_t layer) const {
    return data_ + Offset(page, layer, 1);
  }

  // Returns the physical memory of `page` to the OS (madvise MADV_DONTNEED);
  // the page reads as zeros afterwards.
  void ReleasePage(int64_t page);

 private:
  KvStorage(int64_t num_layers, int64_t kv_dim, int64_t page_size,
            int64_t num_pages, float* data, size_t mapped_bytes);
  size_t Offset(int64_t page, int64_t layer, int kv) const {
    return static_cast<size_t>(page * page_stride_floats_ +
                               ((layer * 2 + kv) * page_size_ * kv_dim_));
  }
  int64_t num_layers_, kv_dim_, page_size_, num_pages_;
  int64_t page_stride_floats_;
  float* data_ = nullptr;
  size_t mapped_bytes_ = 0;
};

// The OS page size in bytes (sysconf), and `bytes` rounded up to it.
int64_t OsPageBytes();
int64_t RoundUpToOsPage(int64_t bytes);

// Bytes of [addr, addr + length) resident in physical memory (mincore).
// `addr` must be OS-page aligned. Returns 0 on failure. No heap use.
int64_t ResidentBytesOf(const void* addr, size_t length);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_KV_KV_STORAGE_H_
