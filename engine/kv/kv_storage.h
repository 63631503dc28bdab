// Paged key/value storage for the full-attention layers (host memory), in
// one of the KvDType element types.
#ifndef PDSERVE_ENGINE_KV_KV_STORAGE_H_
#define PDSERVE_ENGINE_KV_KV_STORAGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/kv/kv_dtype.h"

namespace pdserve {

// Storage for `num_pages` pages; a page holds `page_size` consecutive token
// positions of one sequence for every layer:
//   [page][layer][0 = keys, 1 = values][page_size * KvRowBytes(kv_dim)]
// Within one layer of one page (slot s < page_size, head h, element d of
// head_dim, i = h * head_dim + d < kv_dim):
//   kF32:        keys and values [s][kv_dim] floats (the layout the CUDA
//                backend copies byte for byte).
//   kF16:        keys TRANSPOSED, element (s, i) at [i][s], so the keys of
//                consecutive slots are contiguous for the attention kernels;
//                values [s][kv_dim].
//   kBF16:       in pairs, the operand layout of a bf16 dot product
//                (vdpbf16ps): keys (s, i) at [i / 2][s][i % 2] (16 slots x 2
//                elements of a head in 64 bytes), values (s, i) at
//                [h][s / 2][d][s % 2] (2 slots x 16 elements in 64 bytes;
//                a head's values in a page contiguous, like its keys, so
//                that decode attention streams two runs per page and head);
//                page_size must be even.
//   kQ8_0:       keys: int8 [i][s], then f16 scales [h][d / 32][s];
//                values: int8 [s][kv_dim], then f16 scales [s][kv_dim / 32].
// Write/ReadKey/ReadValue hide the layouts; kernels read them directly.
// Pages are page_stride_bytes() apart, a multiple of the OS page size, so a
// page's memory can be returned to the OS on its own (ReleasePage).
//
// The memory is one anonymous MAP_NORESERVE mapping: pages cost physical
// memory only once written, and read as zeros until then. This class only
// owns memory; which sequence owns which page is decided by the KV pool.
// Not thread-safe for concurrent writes to the same slot.
class KvStorage {
 public:
  // Maps the storage; RESOURCE_EXHAUSTED names the bytes when mmap fails,
  // INVALID_ARGUMENT for non-positive dimensions or a head_dim the dtype
  // cannot store (CheckKvDType). head_dim 0 means kv_dim (one head).
  // huge_pages: ask for transparent huge pages (MADV_HUGEPAGE): attention
  // then streams the cache with far fewer TLB misses (decode at a 4K
  // context ~15% faster), and written memory becomes resident in 2 MiB
  // steps instead of 4 KiB ones.
  static absl::StatusOr<std::unique_ptr<KvStorage>> Create(
      int64_t num_layers, int64_t kv_dim, int64_t page_size, int64_t num_pages,
      KvDType dtype = KvDType::kF32, int64_t head_dim = 0,
      bool huge_pages = false);
  // Same, aborting the process when the mapping fails or the shape is bad
  // (tests, small pools).
  KvStorage(int64_t num_layers, int64_t kv_dim, int64_t page_size,
            int64_t num_pages, KvDType dtype = KvDType::kF32,
            int64_t head_dim = 0);
  ~KvStorage();
  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;

  int64_t num_layers() const { return num_layers_; }
  int64_t kv_dim() const { return kv_dim_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t page_size() const { return page_size_; }
  int64_t num_pages() const { return num_pages_; }
  KvDType dtype() const { return dtype_; }
  // Bytes of one token's keys (or values) in one layer.
  int64_t row_bytes() const { return row_bytes_; }
  // Bytes one token occupies in one layer (key + value).
  int64_t bytes_per_token_per_layer() const { return 2 * row_bytes_; }
  // Bytes of data in one page (all layers).
  int64_t bytes_per_page() const {
    return num_layers_ * 2 * page_size_ * row_bytes_;
  }
  // Distance between pages in bytes (bytes_per_page rounded up to the OS
  // page size), and in floats.
  int64_t page_stride_bytes() const { return page_stride_bytes_; }
  int64_t page_stride_floats() const { return page_stride_bytes_ / 4; }
  // Length of the mapping in bytes.
  size_t mapped_bytes() const { return mapped_bytes_; }
  const void* mapping() const { return data_; }

  // The key (value) block of `layer` in `page`: page_size * row_bytes()
  // bytes in the dtype's layout above.
  uint8_t* key_block(int64_t page, int64_t layer) {
    return data_ + Offset(page, layer, 0);
  }
  uint8_t* value_block(int64_t page, int64_t layer) {
    return data_ + Offset(page, layer, 1);
  }
  const uint8_t* key_block(int64_t page, int64_t layer) const {
    return data_ + Offset(page, layer, 0);
  }
  const uint8_t* value_block(int64_t page, int64_t layer) const {
    return data_ + Offset(page, layer, 1);
  }
  // kF32 only: [page_size][kv_dim] keys (values) of `layer` in `page`.
  float* keys(int64_t page, int64_t layer) {
    return reinterpret_cast<float*>(key_block(page, layer));
  }
  float* values(int64_t page, int64_t layer) {
    return reinterpret_cast<float*>(value_block(page, layer));
  }
  const float* keys(int64_t page, int64_t layer) const {
    return reinterpret_cast<const float*>(key_block(page, layer));
  }
  const float* values(int64_t page, int64_t layer) const {
    return reinterpret_cast<const float*>(value_block(page, layer));
  }

  // Stores one token's key and value (kv_dim floats each) in `slot` of
  // `page`, converted to the dtype (round to nearest even; Q8_0 as GGML's
  // quantize_row_q8_0).
  void Write(int64_t page, int64_t layer, int64_t slot, const float* key,
             const float* value);
  // Elements [first, first + count) of the stored key (value) of `slot`,
  // converted back to floats (count -1: up to kv_dim).
  void ReadKey(int64_t page, int64_t layer, int64_t slot, float* out,
               int64_t first = 0, int64_t count = -1) const;
  void ReadValue(int64_t page, int64_t layer, int64_t slot, float* out,
                 int64_t first = 0, int64_t count = -1) const;

  // Returns the physical memory of `page` to the OS (madvise MADV_DONTNEED);
  // the page reads as zeros afterwards.
  void ReleasePage(int64_t page);

  // kBF16: the uint16 index of key (value) element i of slot s in its
  // block (the pair layouts above).
  int64_t Bf16KeyIndex(int64_t s, int64_t i) const {
    return ((i / 2) * page_size_ + s) * 2 + (i % 2);
  }
  int64_t Bf16ValueIndex(int64_t s, int64_t i) const {
    const int64_t h = i / head_dim_, d = i % head_dim_;
    return (((h * (page_size_ / 2) + s / 2) * head_dim_) + d) * 2 + (s % 2);
  }

 private:
  KvStorage(int64_t num_layers, int64_t kv_dim, int64_t page_size,
            int64_t num_pages, KvDType dtype, int64_t head_dim,
            uint8_t* data, size_t mapped_bytes);
  size_t Offset(int64_t page, int64_t layer, int kv) const {
    return static_cast<size_t>(page * page_stride_bytes_ +
                               (layer * 2 + kv) * page_size_ * row_bytes_);
  }
  int64_t num_layers_, kv_dim_, page_size_, num_pages_;
  KvDType dtype_;
  int64_t head_dim_;
  int64_t row_bytes_;
  int64_t page_stride_bytes_;
  uint8_t* data_ = nullptr;
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
