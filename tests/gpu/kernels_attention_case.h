// The paged-attention test case shared by the CUDA attention kernel tests
// (kernels_attention_test, kernels_flash_attention_test): a host KvStorage
// with random keys/values (shuffled page tables, sequences at different
// start positions), its byte copy on the device (f32, or bf16-rounded for a
// bf16 cache, the host then holding the same rounded values), random
// queries and new rows, and the CPU reference (engine/model/attention.h
// AttendBlock) over the host storage. Not thread-safe; one test at a time.
#ifndef PDSERVE_TESTS_GPU_KERNELS_ATTENTION_CASE_H_
#define PDSERVE_TESTS_GPU_KERNELS_ATTENTION_CASE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "engine/kv/kv_storage.h"
#include "engine/model/attention.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/dtype.h"
#include "tests/gpu/kernels_test_util.h"

namespace pdserve::cuda::testing {

// Device-looking pointers and a one-row batch for host-side precondition
// tests: never dereferenced (the launchers refuse before any launch).
inline float* FakeFloats() { return reinterpret_cast<float*>(uintptr_t{256}); }
inline AttentionBatch FakeBatch() {
  int32_t* i = reinterpret_cast<int32_t*>(uintptr_t{256});
  return AttentionBatch{1, i, i, i, i, 1, 1, 1};
}

inline constexpr int64_t kLayers = 2;
inline constexpr int64_t kLayer = 1;  // exercises the layer offset
inline constexpr int64_t kPageSize = 16;

struct SeqSpec {
  int32_t start_pos;
  int32_t len;
};

class AttentionCase {
 public:
  AttentionCase(int kv_heads, int group, int head_dim,
                std::vector<SeqSpec> seqs, float q_scale, uint32_t seed,
                KvType type = KvType::kF32)
      : hk_(kv_heads),
        group_(group),
        hd_(head_dim),
        seqs_(std::move(seqs)),
        rng_(seed),
        type_(type) {
    kv_dim_ = static_cast<int64_t>(hk_) * hd_;
    q_dim_ = kv_dim_ * group_;
    q_stride_ = q_dim_ + 8;
    int64_t pages = 0;
    for (const SeqSpec& s : seqs_) {
      pages += (s.start_pos + s.len + kPageSize - 1) / kPageSize;
      rows_ += s.len;
    }
    num_pages_ = pages + 3;  // a few never referenced
    kv_ = std::make_unique<KvStorage>(kLayers, kv_dim_, kPageSize, num_pages_);
    std::vector<int32_t> ids(num_pages_);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng_);
    int64_t next = 0;
    for (const SeqSpec& s : seqs_) {
      page_start_.push_back(static_cast<int32_t>(page_table_.size()));
      const int64_t n = (s.start_pos + s.len + kPageSize - 1) / kPageSize;
      for (int64_t i = 0; i < n; ++i) page_table_.push_back(ids[next++]);
    }
    page_start_.push_back(static_cast<int32_t>(page_table_.size()));
    // Every page of every layer random (the cached context included).
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (int64_t p = 0; p < num_pages_; ++p) {
      for (int64_t l = 0; l < kLayers; ++l) {
        float* k = kv_->keys(p, l);
        float* v = kv_->values(p, l);
        for (int64_t i = 0; i < kPageSize * kv_dim_; ++i) {
          k[i] = Round(d(rng_));
          v[i] = Round(d(rng_));
        }
      }
    }
    q_ = RandomFloats(rows_ * q_stride_, rng_, -q_scale, q_scale);
    k_new_ = RandomFloats(rows_ * kv_dim_, rng_);
    v_new_ = RandomFloats(rows_ * kv_dim_, rng_);
  }

  // The value the cache holds for x (bf16 caches round).
  float Round(float x) const {
    return type_ == KvType::kBF16 ? BF16ToF32(F32ToBF16(x)) : x;
  }
  // The host cache as the device stores it (bf16 bits when bf16).
  std::vector<uint16_t> HostCacheBf16() const {
    const std::vector<float> f = HostCache();
    std::vector<uint16_t> h(f.size());
    for (size_t i = 0; i < f.size(); ++i) h[i] = F32ToBF16(f[i]);
    return h;
  }
  bool DeviceCacheEqualsHost() const {
    if (type_ == KvType::kBF16) return d_cache16_.Download() == HostCacheBf16();
    return d_cache_.Download() == HostCache();
  }

  int64_t cache_floats() const {
    return num_pages_ * kv_->page_stride_floats();
  }
  std::vector<float> HostCache() const {
    const float* base = kv_->keys(0, 0);
    return std::vector<float>(base, base + cache_floats());
  }

  // Writes the new rows' K/V into the host storage (the CPU StoreKv).
  void HostStore() {
    int64_t row = 0;
    for (size_t s = 0; s < seqs_.size(); ++s) {
      for (int32_t t = 0; t < seqs_[s].len; ++t, ++row) {
        const int64_t pos = seqs_[s].start_pos + t;
        const int32_t page = page_table_[page_start_[s] + pos / kPageSize];
        float* kd = kv_->keys(page, kLayer) + (pos % kPageSize) * kv_dim_;
        float* vd = kv_->values(page, kLayer) + (pos % kPageSize) * kv_dim_;
        for (int64_t i = 0; i < kv_dim_; ++i) {
          kd[i] = Round(k_new_[row * kv_dim_ + i]);
          vd[i] = Round(v_new_[row * kv_dim_ + i]);
        }
      }
    }
  }

  std::vector<float> CpuAttention() const {
    std::vector<float> out(rows_ * q_stride_, 0.0f);
    int64_t first = 0;
    for (size_t s = 0; s < seqs_.size(); ++s) {
      const SeqSpec& sp = seqs_[s];
      std::vector<float> scratch(
          AttentionScratchFloats(sp.start_pos + sp.len, hd_));
      for (int h = 0; h < hk_; ++h) {
        AttentionBlock b;
        b.kv = kv_.get();
        b.layer = kLayer;
        b.page_table = absl::MakeConstSpan(page_table_.data() + page_start_[s],
                                           page_start_[s + 1] - page_start_[s]);
        b.start_pos = sp.start_pos;
        b.row_begin = 0;
        b.row_end = sp.len;
        b.kv_head = h;
        b.group = group_;
        b.head_dim = hd_;
        b.q = q_.data() + first * q_stride_;
        b.q_stride = q_stride_;
        b.out = out.data() + first * q_stride_;
        AttendBlock(b, scratch.data());
      }
      first += sp.len;
    }
    return out;
  }

  // Uploads the (pre-store) host cache and the batch arrays.
  void Upload() {
    if (type_ == KvType::kBF16) {
      d_cache16_.Resize(cache_floats());
      d_cache16_.Upload(HostCacheBf16());
    } else {
      d_cache_.Resize(cache_floats());
      d_cache_.Upload(HostCache());
    }
    std::vector<int32_t> q_start = {0}, start;
    int32_t max_q = 0, max_kv = 0;
    for (const SeqSpec& s : seqs_) {
      q_start.push_back(q_start.back() + s.len);
      start.push_back(s.start_pos);
      max_q = std::max(max_q, s.len);
      max_kv = std::max(max_kv, s.start_pos + s.len);
    }
    d_q_start_.Resize(q_start.size());
    d_q_start_.Upload(q_start);
    d_start_.Resize(start.size());
    d_start_.Upload(start);
    d_page_start_.Resize(page_start_.size());
    d_page_start_.Upload(page_start_);
    d_pages_.Resize(page_table_.size());
    d_pages_.Upload(page_table_);
    d_q_.Resize(q_.size());
    d_q_.Upload(q_);
    d_k_.Resize(k_new_.size());
    d_k_.Upload(k_new_);
    d_v_.Resize(v_new_.size());
    d_v_.Upload(v_new_);
    d_out_.Resize(rows_ * q_stride_);
    batch_.num_seqs = static_cast<int32_t>(seqs_.size());
    batch_.q_start = d_q_start_.get();
    batch_.start_pos = d_start_.get();
    batch_.page_start = d_page_start_.get();
    batch_.page_table = d_pages_.get();
    batch_.max_q_len = max_q;
    batch_.max_kv_len = max_kv;
    batch_.total_rows = static_cast<int32_t>(rows_);
    cache_.data = type_ == KvType::kBF16
                      ? reinterpret_cast<float*>(d_cache16_.get())
                      : d_cache_.get();
    cache_.type = type_;
    cache_.num_layers = kLayers;
    cache_.kv_dim = kv_dim_;
    cache_.page_size = kPageSize;
    cache_.num_pages = num_pages_;
    cache_.page_stride_floats = kv_->page_stride_floats();
    shape_.num_heads = hk_ * group_;
    shape_.num_kv_heads = hk_;
    shape_.head_dim = hd_;
  }

  cudaError_t DeviceStore() {
    return StoreKv(cache_, kLayer, batch_, d_k_.get(), kv_dim_, d_v_.get(),
                   kv_dim_, nullptr);
  }

  // Rounds the queries to bf16 (before Upload), so that a kernel that
  // rounds them sees the reference's values.
  void RoundQueriesToBf16() {
    for (float& x : q_) x = BF16ToF32(F32ToBF16(x));
  }

  void ExpectOutput(const std::vector<float>& want, float tol = 2e-5f) const {
    const std::vector<float> got = d_out_.Download();
    for (int64_t r = 0; r < rows_; ++r) {
      for (int64_t i = 0; i < q_dim_; ++i) {
        ASSERT_NEAR(got[r * q_stride_ + i], want[r * q_stride_ + i], tol)
            << "row " << r << " dim " << i << " (head " << i / hd_ << ")";
      }
    }
  }

  DeviceKvCache cache_;
  AttentionBatch batch_;
  AttentionShape shape_;
  DeviceBuffer<float> d_cache_, d_q_, d_k_, d_v_, d_out_;
  DeviceBuffer<uint16_t> d_cache16_;
  DeviceBuffer<int32_t> d_q_start_, d_start_, d_page_start_, d_pages_;
  int64_t q_stride_ = 0;

 private:
  int hk_, group_, hd_;
  std::vector<SeqSpec> seqs_;
  std::mt19937 rng_;
  KvType type_;
  int64_t kv_dim_ = 0, q_dim_ = 0, rows_ = 0, num_pages_ = 0;
  std::unique_ptr<KvStorage> kv_;
  std::vector<int32_t> page_table_, page_start_;
  std::vector<float> q_, k_new_, v_new_;
};

}  // namespace pdserve::cuda::testing

#endif  // PDSERVE_TESTS_GPU_KERNELS_ATTENTION_CASE_H_
