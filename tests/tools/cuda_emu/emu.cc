// Fiber scheduler and CUDA runtime shims for the emulation.
#include <cstdint>

// Fiber switch without signal-mask syscalls (x86-64 SysV): saves the
// callee-saved registers on the old stack, stores its sp, loads the new one.
extern "C" void emu_switch(void** save_sp, void* new_sp);
asm(R"(
.text
.globl emu_switch
.type emu_switch,@function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_switch, .-emu_switch
)");

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "emu.h"

namespace emu {
alignas(256) unsigned char dyn_smem[256 * 1024];
namespace {

struct Fiber {
  void* sp = nullptr;
  std::vector<char> stack;
  bool done = false;
  uint3 tid;
};
std::vector<Fiber> g_fibers;
void* g_main_sp = nullptr;
void* g_dead_sp = nullptr;
int g_cur = -1;
std::function<void()> g_body;
int g_nthreads = 0;
// Block barrier
int g_block_live = 0, g_block_count = 0;
uint64_t g_block_gen = 0;
// Warp barriers
std::vector<int> g_warp_live, g_warp_count;
std::vector<uint64_t> g_warp_gen;
std::vector<uint64_t> g_slots;  // [warp][32]

void Yield() {
  const int self = g_cur;
  // next runnable fiber
  for (int k = 1; k <= g_nthreads; ++k) {
    const int n = (self + k) % g_nthreads;
    if (!g_fibers[n].done) {
      if (n == self) return;
      g_cur = n;
      threadIdx = g_fibers[n].tid;
      emu_switch(&g_fibers[self].sp, g_fibers[n].sp);
      g_cur = self;
      threadIdx = g_fibers[self].tid;
      return;
    }
  }
}

void Entry() {
  g_body();
  Fiber& f = g_fibers[g_cur];
  f.done = true;
  const int warp = g_cur / 32;
  --g_block_live;
  if (g_block_count > 0 && g_block_count >= g_block_live) {
    g_block_count = 0;
    ++g_block_gen;
  }
  --g_warp_live[warp];
  if (g_warp_count[warp] > 0 && g_warp_count[warp] >= g_warp_live[warp]) {
    g_warp_count[warp] = 0;
    ++g_warp_gen[warp];
  }
  // switch to any other live fiber, or back to main
  for (int k = 1; k <= g_nthreads; ++k) {
    const int n = (g_cur + k) % g_nthreads;
    if (!g_fibers[n].done) {
      g_cur = n;
      threadIdx = g_fibers[n].tid;
      emu_switch(&g_dead_sp, g_fibers[n].sp);
    }
  }
  emu_switch(&g_dead_sp, g_main_sp);
}

void WarpBarrier() {
  const int warp = g_cur / 32;
  const uint64_t gen = g_warp_gen[warp];
  if (++g_warp_count[warp] >= g_warp_live[warp]) {
    g_warp_count[warp] = 0;
    ++g_warp_gen[warp];
    return;
  }
  while (g_warp_gen[warp] == gen) Yield();
}

}  // namespace

void WarpSync() { WarpBarrier(); }

void SyncThreads() {
  const uint64_t gen = g_block_gen;
  if (++g_block_count >= g_block_live) {
    g_block_count = 0;
    ++g_block_gen;
    return;
  }
  while (g_block_gen == gen) Yield();
}

uint64_t WarpExchange(uint64_t bits, int src_lane) {
  const int warp = g_cur / 32;
  g_slots[warp * 32 + (g_cur & 31)] = bits;
  WarpBarrier();
  const uint64_t r = g_slots[warp * 32 + src_lane];
  WarpBarrier();
  return r;
}

void Run(dim3 grid, dim3 block, std::function<void()> body, size_t smem) {
  smem = std::min(smem, sizeof(dyn_smem));
  gridDim = grid;
  blockDim = block;
  g_body = std::move(body);
  g_nthreads = block.x * block.y * block.z;
  if (block.y != 1 || block.z != 1) std::abort();
  g_fibers.resize(g_nthreads);
  const int warps = (g_nthreads + 31) / 32;
  g_warp_live.assign(warps, 0);
  g_warp_count.assign(warps, 0);
  g_warp_gen.assign(warps, 0);
  g_slots.assign(warps * 32, 0);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = make_uint3(x, y, z);
        std::memset(dyn_smem, 0xff, smem);  // poison
        g_block_live = g_nthreads;
        g_block_count = 0;
        for (int w = 0; w < warps; ++w) {
          g_warp_live[w] = std::min(32, g_nthreads - 32 * w);
          g_warp_count[w] = 0;
        }
        for (int t = 0; t < g_nthreads; ++t) {
          Fiber& f = g_fibers[t];
          f.done = false;
          f.tid = make_uint3(t, 0, 0);
          f.stack.resize(256 * 1024);
          // Initial frame: six zero registers, then Entry as the return
          // address (rsp % 16 == 8 at Entry, as after a call).
          auto top =
              reinterpret_cast<uintptr_t>(f.stack.data() + f.stack.size()) &
              ~uintptr_t{15};
          auto* sp = reinterpret_cast<void**>(top - 8 * sizeof(void*));
          for (int r = 0; r < 6; ++r) sp[r] = nullptr;
          sp[6] = reinterpret_cast<void*>(&Entry);
          sp[7] = nullptr;
          f.sp = sp;
        }
        g_cur = 0;
        threadIdx = g_fibers[0].tid;
        emu_switch(&g_main_sp, g_fibers[0].sp);
        g_cur = -1;
      }
}

}  // namespace emu
