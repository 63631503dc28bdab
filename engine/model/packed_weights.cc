#include "engine/model/packed_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/matmul.h"

namespace pdserve {
namespace {

constexpr int64_t kAlign = 64;

// Every matrix MatMul multiplies, by address so they can be rewritten.
std::vector<WeightView*> Matrices(ModelWeights& w) {
  std::vector<WeightView*> out;
  auto add = [&](WeightView& v) {
    if (!v.empty()) out.push_back(&v);
  };
  auto add_expert = [&](ExpertWeights& e) {
    add(e.gate);
    add(e.up);
    add(e.down);
  };
  for (LayerWeights& lw : w.layers) {
    for (WeightView* v : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate,
                          &lw.w_up, &lw.w_down, &lw.router, &lw.shared_gate,
                          &lw.lin_qkv, &lw.lin_z, &lw.lin_b, &lw.lin_a,
                          &lw.lin_out}) {
      add(*v);
    }
    for (ExpertWeights& e : lw.experts) add_expert(e);
    add_expert(lw.shared);
  }
  add(w.lm_head);
  VisionWeights& v = w.vision;
  add(v.patch_embed);
  for (VisionBlockWeights& b : v.blocks) {
    for (WeightView* m : {&b.qkv, &b.proj, &b.fc1, &b.fc2}) add(*m);
  }
  add(v.merger_fc1);
  add(v.merger_fc2);
  return out;
}

bool PackingDisabled() {
  const char* env = std::getenv("PDSERVE_PACK");
  return env != nullptr && std::strcmp(env, "0") == 0;
}

// Asks the OS to drop the resident pages wholly inside a source matrix
// (file pages of a mapped model); a no-op for memory it cannot page out.
void OfferBack(const WeightView& w) {
#ifdef MADV_PAGEOUT
  const int64_t page = sysconf(_SC_PAGESIZE);
  const auto begin = reinterpret_cast<uintptr_t>(w.data);
  const auto end = begin + static_cast<uintptr_t>(w.rows * w.row_bytes);
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = end / page * page;
  if (last > first) {
    madvise(reinterpret_cast<void*>(first), last - first, MADV_PAGEOUT);
  }
#else
  (void)w;
#endif
}

}  // namespace

std::unique_ptr<const PackedModel> PackModelForCpu(const ModelWeights& src,
                                                    ThreadPool& pool) {
  auto out = std::make_unique<PackedModel>();
  out->weights = src;
  if (PackingDisabled()) return out;
  std::vector<WeightView*> mats = Matrices(out->weights);
  std::vector<int64_t> offset(mats.size() + 1, 0);
  for (size_t i = 0; i < mats.size(); ++i) {
    const int64_t bytes = PackedWeightBytes(*mats[i]);
    offset[i + 1] = offset[i] + (bytes + kAlign - 1) / kAlign * kAlign;
  }
  const int64_t total = offset.back();
  if (total == 0) return out;
  void* base = mmap(nullptr, static_cast<size_t>(total),
                    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return out;  // unpacked: slower, still correct
#ifdef MADV_HUGEPAGE
  madvise(base, static_cast<size_t>(total), MADV_HUGEPAGE);
#endif
  auto* bytes = static_cast<uint8_t*>(base);
  // The tied LM head is the token embedding: its rows are still looked up
  // through `data`, so its pages stay.
  const void* embedding = src.token_embedding.data;
  pool.ParallelFor(static_cast<int64_t>(mats.size()), 1,
                   [&](int64_t b, int64_t e) {
                     for (int64_t i = b; i < e; ++i) {
                       if (offset[i + 1] == offset[i]) continue;
                       *mats[i] = PackWeights(*mats[i], bytes + offset[i]);
                       if (mats[i]->data != embedding) OfferBack(*mats[i]);
                     }
                   });
  out->packed_bytes = total;
  out->weights.storage.push_back(std::shared_ptr<const void>(
      base, [total](const void* p) {
        munmap(const_cast<void*>(p), static_cast<size_t>(total));
      }));
  return out;
}

}  // namespace pdserve
