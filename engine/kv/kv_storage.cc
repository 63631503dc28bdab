#include "engine/kv/kv_storage.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pdserve {
namespace {

int64_t StrideFloats(int64_t num_layers, int64_t kv_dim, int64_t page_size) {
  return RoundUpToOsPage(num_layers * 2 * page_size * kv_dim * 4) / 4;
}

void* MapAnonymous(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

int64_t OsPageBytes() {
  static const int64_t bytes = [] {
    long v = sysconf(_SC_PAGESIZE);
    return v > 0 ? static_cast<int64_t>(v) : int64_t{4096};
  }();
  return bytes;
}

int64_t RoundUpToOsPage(int64_t bytes) {
  const int64_t p = OsPageBytes();
  return (bytes + p - 1) / p * p;
}

int64_t ResidentBytesOf(const void* addr, size_t length) {
  if (addr == nullptr || length == 0) return 0;
  const size_t page = static_cast<size_t>(OsPageBytes());
  constexpr size_t kWindow = 4096;  // OS pages per mincore call
  unsigned char vec[kWindow];
  const char* base = static_cast<const char*>(addr);
  const size_t pages = (length + page - 1) / page;
  int64_t resident = 0;
  for (size_t first = 0; first < pages; first += kWindow) {
    const size_t n = std::min(kWindow, pages - first);
    if (mincore(const_cast<char*>(base + first * page), n * page, vec) != 0) {
      return 0;
    }
    for (size_t i = 0; i < n; ++i) resident += (vec[i] & 1);
  }
  return resident * static_cast<int64_t>(page);
}

absl::StatusOr<std::unique_ptr<KvStorage>> KvStorage::Create(
    int64_t num_layers, int64_t kv_dim, int64_t page_size, int64_t num_pages) {
  if (num_layers <= 0 || kv_dim <= 0 || page_size <= 0 || num_pages <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV storage dimensions must be positive: layers=", num_layers,
        " kv_dim=", kv_dim, " page_size=", page_size, " pages=", num_pages));
  }
  const int64_t stride = StrideFloats(num_layers, kv_dim, page_size);
  const size_t bytes = static_cast<size_t>(stride) * 4 * num_pages;
  void* p = MapAnonymous(bytes);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot map ", bytes, " bytes for ", num_pages, " KV pages"));
  }
  return std::unique_ptr<KvStorage>(new KvStorage(
      num_layers, kv_dim, page_size, num_pages, static_cast<float*>(p),
      bytes));
}

KvStorage::KvStorage(int64_t num_layers, int64_t kv_dim, int64_t page_size,
                     int64_t num_pages, float* data, size_t mapped_bytes)
    : num_layers_(num_layers),
      kv_dim_(kv_dim),
      page_size_(page_size),
      num_pages_(num_pages),
      page_stride_floats_(StrideFloats(num_layers, kv_dim, page_size)),
      data_(data),
      mapped_bytes_(mapped_bytes) {}

KvStorage::KvStorage(int64_t num_layers, int64_t kv_dim, int64_t page_size,
                     int64_t num_pages)
    : num_layers_(num_layers),
      kv_dim_(kv_dim),
      page_size_(page_size),
      num_pages_(num_pages),
      page_stride_floats_(StrideFloats(num_layers, kv_dim, page_size)) {
  mapped_bytes_ = static_cast<size_t>(page_stride_floats_) * 4 * num_pages;
  data_ = static_cast<float*>(MapAnonymous(mapped_bytes_));
  if (data_ == nullptr) {
    std::fprintf(stderr, "KvStorage: cannot map %zu bytes\n", mapped_bytes_);
    std::abort();
  }
}

KvStorage::~KvStorage() {
  if (data_ != nullptr) munmap(data_, mapped_bytes_);
}

void KvStorage::ReleasePage(int64_t page) {
  if (page < 0 || page >= num_pages_) return;
  madvise(data_ + page * page_stride_floats_,
          static_cast<size_t>(page_stride_floats_) * 4, MADV_DONTNEED);
}

}  // namespace pdserve
