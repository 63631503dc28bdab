// Grouped MatMul: the products of several weight matrices with their own
// token rows, split into (group, row block) work units that the pool's threads
// claim from one shared counter. Uses the same per-ISA prepare/rows kernels as
// MatMul, whose values do not depend on the row range computed, so the
// results are bitwise those of separate MatMul calls.
#include "kernels/matmul_grouped.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "kernels/matmul_internal.h"

namespace pdserve {
namespace kernels_internal {
namespace {

// Tokens per prepare work unit (the token-lane layouts interleave 16 tokens
// per cache line: a split inside a group would share lines).
constexpr int64_t kPrepGroup = 16;
// Work units per thread aimed at (dynamic claiming evens out the rest) and the
// least work per unit, in weight bytes x (tokens + 2), so that a unit costs
// well over the claim itself.
constexpr int64_t kUnitsPerThread = 16;
constexpr int64_t kMinUnitCost = 64 << 10;

// Per calling thread; grows to the largest call seen and is then reused.
struct GroupedScratch {
  AlignedScratch bytes;            // prepared activations
  std::vector<int64_t> xq_offset;  // [groups] prepared bytes, -1: none
  std::vector<int64_t> prep_end;   // [groups] prefix of prepare units
  std::vector<int64_t> unit_end;   // [groups] prefix of row units
  std::vector<int64_t> unit_rows;  // [groups] rows per row unit

  void Size(size_t n) {
    if (xq_offset.size() < n) {
      xq_offset.resize(n);
      prep_end.resize(n);
      unit_end.resize(n);
      unit_rows.resize(n);
    }
  }
  uint8_t* Bytes(int64_t n) { return bytes.Get(n); }
};

GroupedScratch& ThreadScratch() {
  thread_local GroupedScratch s;
  return s;
}

bool Active(const MatMulGroup& g) { return g.n_tokens > 0 && g.w.rows > 0; }

bool NeedsPrepare(const IsaKernels& k, const MatMulGroup& g) {
  return Active(g) && g.w.cols > 0 && KernelsFor(k, g.w).needs_prepare(g.w.type);
}

// Same activations prepared the same way (the packed and row-major kernels
// lay them out differently).
bool SameInput(const IsaKernels& k, const MatMulGroup& a,
               const MatMulGroup& b) {
  return a.x == b.x && a.x_stride == b.x_stride && a.n_tokens == b.n_tokens &&
         a.w.type == b.w.type && a.w.cols == b.w.cols &&
         KernelsFor(k, a.w).prepare == KernelsFor(k, b.w).prepare;
}

// Lays out the prepared activations: s.xq_offset[i] (-1 when group i needs
// none) and s.prep_end[i] (prefix count of kPrepGroup-token units over the
// groups that prepare their own). Returns the bytes needed.
int64_t PlanPrepare(const IsaKernels& k, absl::Span<const MatMulGroup> groups,
                    GroupedScratch& s) {
  int64_t bytes = 0, units = 0, last = -1;
  for (size_t i = 0; i < groups.size(); ++i) {
    const MatMulGroup& g = groups[i];
    s.xq_offset[i] = -1;
    if (NeedsPrepare(k, g)) {
      if (last >= 0 && SameInput(k, groups[last], g)) {
        s.xq_offset[i] = s.xq_offset[last];
      } else {
        s.xq_offset[i] = bytes;
        const int64_t b = KernelsFor(k, g.w).prepared_bytes(
            g.w.type, g.w.cols, g.n_tokens);
        bytes += (b + 63) / 64 * 64;
        units += (g.n_tokens + kPrepGroup - 1) / kPrepGroup;
        last = static_cast<int64_t>(i);
      }
    }
    s.prep_end[i] = units;
  }
  return bytes;
}

// Quantizes the activations of prepare units [u_begin, u_end).
void PrepareUnits(const IsaKernels& k, absl::Span<const MatMulGroup> groups,
                  const GroupedScratch& s, uint8_t* xq, int64_t u_begin,
                  int64_t u_end) {
  size_t i = 0;
  for (int64_t u = u_begin; u < u_end; ++u) {
    while (s.prep_end[i] <= u) ++i;
    const MatMulGroup& g = groups[i];
    const int64_t first = i == 0 ? 0 : s.prep_end[i - 1];
    const int64_t t0 = (u - first) * kPrepGroup;
    const int64_t t1 = std::min(g.n_tokens, t0 + kPrepGroup);
    KernelsFor(k, g.w).prepare(g.w.type, g.x, g.x_stride, g.w.cols,
                               g.n_tokens, t0, t1, xq + s.xq_offset[i]);
  }
}

// Splits every group's rows into units of whole row tiles, sized so that
// there are about kUnitsPerThread units per thread, none tiny; fills
// s.unit_rows and s.unit_end. Returns the number of units.
int64_t PlanRows(const IsaKernels& k, absl::Span<const MatMulGroup> groups,
                 int threads, GroupedScratch& s) {
  auto tile = [&](const MatMulGroup& g) { return KernelsFor(k, g.w).row_tile; };
  auto split = [&](const MatMulGroup& g) {
    return KernelsFor(k, g.w).tiles_per_split;
  };
  auto tile_cost = [&](const MatMulGroup& g) {
    return std::max<int64_t>(1, g.w.row_bytes * tile(g)) * (g.n_tokens + 2);
  };
  int64_t total = 0;
  for (const MatMulGroup& g : groups) {
    if (Active(g)) total += (g.w.rows + tile(g) - 1) / tile(g) * tile_cost(g);
  }
  const int64_t target =
      std::max(kMinUnitCost, total / (kUnitsPerThread * threads));
  int64_t units = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    const MatMulGroup& g = groups[i];
    if (Active(g)) {
      const int64_t tiles_per_unit =
          (std::max<int64_t>(1, target / tile_cost(g)) + split(g) - 1) /
          split(g) * split(g);
      s.unit_rows[i] = tiles_per_unit * tile(g);
      units += (g.w.rows + s.unit_rows[i] - 1) / s.unit_rows[i];
    }
    s.unit_end[i] = units;
  }
  return units;
}

MatMulArgs ArgsOf(const MatMulGroup& g, const GroupedScratch& s, const uint8_t* xq,
                  size_t i) {
  return MatMulArgs{
      &g.w,       g.x,
      g.x_stride, s.xq_offset[i] >= 0 ? xq + s.xq_offset[i] : nullptr,
      g.n_tokens, g.y,
      g.y_stride};
}

}  // namespace

void MatMulGroupedWith(const IsaKernels& k,
                       absl::Span<const MatMulGroup> groups, ThreadPool& pool) {
  if (groups.empty()) return;
  GroupedScratch& s = ThreadScratch();
  s.Size(groups.size());
  uint8_t* xq = s.Bytes(std::max<int64_t>(1, PlanPrepare(k, groups, s)));
  const int threads = pool.num_threads();

  const int64_t prep_units = s.prep_end[groups.size() - 1];
  // Quantizing a token costs about as much as a few rows of its product: fan
  // out only when there are enough tokens to pay for waking the threads.
  if (prep_units >= 4 && threads > 1) {
    pool.ParallelFor(prep_units, 1, [&](int64_t b, int64_t e) {
      PrepareUnits(k, groups, s, xq, b, e);
    });
  } else {
    PrepareUnits(k, groups, s, xq, 0, prep_units);
  }

  if (threads == 1) {
    for (size_t i = 0; i < groups.size(); ++i) {
      if (Active(groups[i])) {
        KernelsFor(k, groups[i].w)
            .rows(ArgsOf(groups[i], s, xq, i), 0, groups[i].w.rows);
      }
    }
    return;
  }
  const int64_t units = PlanRows(k, groups, threads, s);
  if (units == 0) return;
  alignas(64) std::atomic<int64_t> next{0};
  auto run = [&](int) {
    size_t i = 0;  // units are claimed in increasing order
    for (int64_t u;
         (u = next.fetch_add(1, std::memory_order_relaxed)) < units;) {
      while (s.unit_end[i] <= u) ++i;
      const MatMulGroup& g = groups[i];
      const int64_t first = i == 0 ? 0 : s.unit_end[i - 1];
      const int64_t r0 = (u - first) * s.unit_rows[i];
      KernelsFor(k, g.w).rows(ArgsOf(g, s, xq, i), r0,
                              std::min(g.w.rows, r0 + s.unit_rows[i]));
    }
  };
  if (units == 1) {
    run(0);
  } else {
    pool.RunOnAll(run);
  }
}

}  // namespace kernels_internal

void MatMulGrouped(absl::Span<const MatMulGroup> groups, ThreadPool& pool) {
  kernels_internal::MatMulGroupedWith(kernels_internal::ActiveKernels(), groups,
                                      pool);
}

}  // namespace pdserve
