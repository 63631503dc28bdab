#include "engine/kv/kv_storage.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/dtype.h"

namespace pdserve {
namespace {

constexpr int64_t kQ8Block = 32;

int64_t StrideBytes(int64_t num_layers, int64_t row_bytes, int64_t page_size) {
  return RoundUpToOsPage(num_layers * 2 * page_size * row_bytes);
}

void* MapAnonymous(size_t bytes, bool huge_pages) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
#ifdef MADV_HUGEPAGE
  if (huge_pages) madvise(p, bytes, MADV_HUGEPAGE);  // advice only
#endif
  return p;
}

absl::Status CheckShape(int64_t num_layers, int64_t kv_dim, int64_t page_size,
                        int64_t num_pages, KvDType dtype, int64_t head_dim) {
  if (num_layers <= 0 || kv_dim <= 0 || page_size <= 0 || num_pages <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV storage dimensions must be positive: layers=", num_layers,
        " kv_dim=", kv_dim, " page_size=", page_size, " pages=", num_pages));
  }
  if (absl::Status s = CheckKvPageSize(dtype, page_size); !s.ok()) return s;
  return CheckKvDType(dtype, kv_dim, head_dim);
}

// GGML's quantize_row_q8_0 for one block of 32: the scale (as f16) and
// round(x / d).
uint16_t QuantizeBlock(const float* x, int8_t* q, int64_t q_stride) {
  float amax = 0.0f;
  for (int64_t i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int64_t i = 0; i < kQ8Block; ++i) {
    q[i * q_stride] = static_cast<int8_t>(std::lround(x[i] * id));
  }
  return F32ToF16(d);
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
    int64_t num_layers, int64_t kv_dim, int64_t page_size, int64_t num_pages,
    KvDType dtype, int64_t head_dim, bool huge_pages) {
  if (head_dim == 0) head_dim = kv_dim;
  if (absl::Status s = CheckShape(num_layers, kv_dim, page_size, num_pages,
                                  dtype, head_dim);
      !s.ok()) {
    return s;
  }
  const int64_t stride =
      StrideBytes(num_layers, KvRowBytes(dtype, kv_dim), page_size);
  const size_t bytes = static_cast<size_t>(stride) * num_pages;
  void* p = MapAnonymous(bytes, huge_pages);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot map ", bytes, " bytes for ", num_pages, " KV pages"));
  }
  return std::unique_ptr<KvStorage>(
      new KvStorage(num_layers, kv_dim, page_size, num_pages, dtype, head_dim,
                    static_cast<uint8_t*>(p), bytes));
}

KvStorage::KvStorage(int64_t num_layers, int64_t kv_dim, int64_t page_size,
                     int64_t num_pages, KvDType dtype, int64_t head_dim,
                     uint8_t* data, size_t mapped_bytes)
    : num_layers_(num_layers),
      kv_dim_(kv_dim),
      page_size_(page_size),
      num_pages_(num_pages),
      dtype_(dtype),
      head_dim_(head_dim),
      row_bytes_(KvRowBytes(dtype, kv_dim)),
      page_stride_bytes_(StrideBytes(num_layers, row_bytes_, page_size)),
      data_(data),
      mapped_bytes_(mapped_bytes) {}

KvStorage::KvStorage(int64_t num_layers, int64_t kv_dim, int64_t page_size,
                     int64_t num_pages, KvDType dtype, int64_t head_dim)
    : num_layers_(num_layers),
      kv_dim_(kv_dim),
      page_size_(page_size),
      num_pages_(num_pages),
      dtype_(dtype),
      head_dim_(head_dim == 0 ? kv_dim : head_dim),
      row_bytes_(KvRowBytes(dtype, kv_dim)),
      page_stride_bytes_(StrideBytes(num_layers, row_bytes_, page_size)) {
  if (absl::Status s = CheckShape(num_layers, kv_dim, page_size, num_pages,
                                  dtype, head_dim_);
      !s.ok()) {
    std::fprintf(stderr, "KvStorage: %s\n", std::string(s.message()).c_str());
    std::abort();
  }
  mapped_bytes_ = static_cast<size_t>(page_stride_bytes_) * num_pages;
  data_ = static_cast<uint8_t*>(MapAnonymous(mapped_bytes_, false));
  if (data_ == nullptr) {
    std::fprintf(stderr, "KvStorage: cannot map %zu bytes\n", mapped_bytes_);
    std::abort();
  }
}

KvStorage::~KvStorage() {
  if (data_ != nullptr) munmap(data_, mapped_bytes_);
}

void KvStorage::Write(int64_t page, int64_t layer, int64_t slot,
                      const float* key, const float* value) {
  uint8_t* kb = key_block(page, layer);
  uint8_t* vb = value_block(page, layer);
  const int64_t ps = page_size_;
  switch (dtype_) {
    case KvDType::kF32:
      std::memcpy(kb + slot * row_bytes_, key, kv_dim_ * sizeof(float));
      std::memcpy(vb + slot * row_bytes_, value, kv_dim_ * sizeof(float));
      return;
    case KvDType::kF16: {
      auto* k16 = reinterpret_cast<uint16_t*>(kb);
      auto* v16 = reinterpret_cast<uint16_t*>(vb) + slot * kv_dim_;
      for (int64_t i = 0; i < kv_dim_; ++i) {
        k16[i * ps + slot] = F32ToF16(key[i]);
        v16[i] = F32ToF16(value[i]);
      }
      return;
    }
    case KvDType::kBF16: {
      auto* k16 = reinterpret_cast<uint16_t*>(kb);
      auto* v16 = reinterpret_cast<uint16_t*>(vb);
      for (int64_t i = 0; i < kv_dim_; ++i) {
        k16[Bf16KeyIndex(slot, i)] = F32ToBF16(key[i]);
        v16[Bf16ValueIndex(slot, i)] = F32ToBF16(value[i]);
      }
      return;
    }
    case KvDType::kQ8_0: {
      auto* k8 = reinterpret_cast<int8_t*>(kb);
      auto* kscale = reinterpret_cast<uint16_t*>(kb + ps * kv_dim_);
      auto* v8 = reinterpret_cast<int8_t*>(vb) + slot * kv_dim_;
      auto* vscale = reinterpret_cast<uint16_t*>(vb + ps * kv_dim_) +
                     slot * (kv_dim_ / kQ8Block);
      for (int64_t b = 0; b < kv_dim_ / kQ8Block; ++b) {
        // Key block b (of head b / (head_dim / 32)) is scale row b.
        kscale[b * ps + slot] = QuantizeBlock(
            key + b * kQ8Block, k8 + b * kQ8Block * ps + slot, ps);
        vscale[b] = QuantizeBlock(value + b * kQ8Block, v8 + b * kQ8Block, 1);
      }
      return;
    }
  }
}

void KvStorage::ReadKey(int64_t page, int64_t layer, int64_t slot,
                        float* out, int64_t first, int64_t count) const {
  const uint8_t* kb = key_block(page, layer);
  const int64_t ps = page_size_;
  const int64_t end = count < 0 ? kv_dim_ : first + count;
  for (int64_t i = first; i < end; ++i) {
    float x = 0.0f;
    switch (dtype_) {
      case KvDType::kF32:
        std::memcpy(&x, kb + (slot * kv_dim_ + i) * 4, 4);
        break;
      case KvDType::kF16:
        x = F16ToF32(reinterpret_cast<const uint16_t*>(kb)[i * ps + slot]);
        break;
      case KvDType::kBF16:
        x = BF16ToF32(
            reinterpret_cast<const uint16_t*>(kb)[Bf16KeyIndex(slot, i)]);
        break;
      case KvDType::kQ8_0: {
        const auto* k8 = reinterpret_cast<const int8_t*>(kb);
        const auto* scale =
            reinterpret_cast<const uint16_t*>(kb + ps * kv_dim_);
        x = F16ToF32(scale[(i / kQ8Block) * ps + slot]) *
            static_cast<float>(k8[i * ps + slot]);
        break;
      }
    }
    out[i - first] = x;
  }
}

void KvStorage::ReadValue(int64_t page, int64_t layer, int64_t slot,
                          float* out, int64_t first, int64_t count) const {
  const uint8_t* vb = value_block(page, layer);
  const int64_t end = count < 0 ? kv_dim_ : first + count;
  for (int64_t i = first; i < end; ++i) {
    float x = 0.0f;
    switch (dtype_) {
      case KvDType::kF32:
        std::memcpy(&x, vb + (slot * kv_dim_ + i) * 4, 4);
        break;
      case KvDType::kF16:
        x = F16ToF32(reinterpret_cast<const uint16_t*>(vb)[slot * kv_dim_ + i]);
        break;
      case KvDType::kBF16:
        x = BF16ToF32(
            reinterpret_cast<const uint16_t*>(vb)[Bf16ValueIndex(slot, i)]);
        break;
      case KvDType::kQ8_0: {
        const auto* v8 = reinterpret_cast<const int8_t*>(vb);
        const auto* scale =
            reinterpret_cast<const uint16_t*>(vb + page_size_ * kv_dim_);
        x = F16ToF32(scale[slot * (kv_dim_ / kQ8Block) + i / kQ8Block]) *
            static_cast<float>(v8[slot * kv_dim_ + i]);
        break;
      }
    }
    out[i - first] = x;
  }
}

void KvStorage::ReleasePage(int64_t page) {
  if (page < 0 || page >= num_pages_) return;
  madvise(data_ + page * page_stride_bytes_,
          static_cast<size_t>(page_stride_bytes_), MADV_DONTNEED);
}

}  // namespace pdserve
