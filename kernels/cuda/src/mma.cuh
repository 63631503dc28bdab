// Warp-level bf16 tensor-core tiles for the attention kernels: one
// mma.sync.m16n8k16 (bf16 inputs, f32 accumulation) and the shared-memory
// fragment loads that feed it. Internal to the kernel library.
//
// Fragment layout (PTX ISA, "Matrix fragments for mma.m16n8k16", .bf16):
// lane = 4 * g + t (g = lane >> 2, t = lane & 3); every 32-bit register
// holds two bf16, the lower-indexed element in the low 16 bits.
//   A (16 x 16, row-major):   a[0] = A[g][2t, 2t+1]     a[1] = A[g+8][2t, 2t+1]
//                             a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8,
//                             2t+9]
//   B (16 x 8, k x n):        b[0] = B[2t, 2t+1][g]     b[1] = B[2t+8, 2t+9][g]
//   C, D (16 x 8, f32):       c[0], c[1] = C[g][2t, 2t+1]
//                             c[2], c[3] = C[g+8][2t, 2t+1]
// MmaBf16 is the mma instruction when compiled for a device (sm_80+); the
// host compilation (the CPU emulator of tests/tools/cuda_emu, which cannot
// run PTX) uses MmaBf16Shuffle, the same product of the same fragments
// computed with warp shuffles. cuda::MmaBf16Tile (a self-test launcher)
// runs either form, so a device test pins the layout above to the hardware.
#ifndef PDSERVE_KERNELS_CUDA_SRC_MMA_CUH_
#define PDSERVE_KERNELS_CUDA_SRC_MMA_CUH_

#include "kernels/cuda/src/common.cuh"

namespace pdserve {
namespace cuda {
namespace internal {

// bf16 bits of x, rounded to nearest even.
__device__ __forceinline__ uint16_t Bf16Bits(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
// Two bf16 in one register: lo in bits 0..15, hi in bits 16..31.
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  return static_cast<uint32_t>(Bf16Bits(lo)) |
         (static_cast<uint32_t>(Bf16Bits(hi)) << 16);
}
__device__ __forceinline__ float LoBf16(uint32_t r) {
  return __uint_as_float(r << 16);
}
__device__ __forceinline__ float HiBf16(uint32_t r) {
  return __uint_as_float(r & 0xffff0000u);
}

// c += A B with the fragments above, by warp shuffles: lane (g, t) fetches
// rows g and g + 8 of A from lanes 4g..4g+3 and columns 2t, 2t+1 of B from
// lanes 8t..8t+7. Every lane of the warp must call it (uniform control).
// Slow; the form the CPU emulator runs.
__device__ __forceinline__ void MmaBf16Shuffle(float c[4], const uint32_t a[4],
                                               const uint32_t b[2]) {
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  // Registers travel in pairs (64-bit shuffles: half the exchanges).
  const unsigned long long a01 =
      a[0] | (static_cast<unsigned long long>(a[1]) << 32);
  const unsigned long long a23 =
      a[2] | (static_cast<unsigned long long>(a[3]) << 32);
  const unsigned long long b01 =
      b[0] | (static_cast<unsigned long long>(b[1]) << 32);
#pragma unroll
  for (int q = 0; q < 4; ++q) {  // lane 4x+q holds k = 2q, 2q+1, 2q+8, 2q+9
    const unsigned long long x01 = __shfl_sync(0xffffffffu, a01, 4 * g + q);
    const unsigned long long x23 = __shfl_sync(0xffffffffu, a23, 4 * g + q);
    const uint32_t ar[4] = {
        static_cast<uint32_t>(x01), static_cast<uint32_t>(x01 >> 32),
        static_cast<uint32_t>(x23), static_cast<uint32_t>(x23 >> 32)};
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      // Lane 4(2t + j) + q holds column 2t + j of B.
      const unsigned long long y =
          __shfl_sync(0xffffffffu, b01, 4 * (2 * t + j) + q);
      const uint32_t b0 = static_cast<uint32_t>(y);
      const uint32_t b1 = static_cast<uint32_t>(y >> 32);
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // rows g, g + 8
        const uint32_t lo = ar[half], hi = ar[2 + half];
        float s = LoBf16(lo) * LoBf16(b0);
        s = fmaf(HiBf16(lo), HiBf16(b0), s);
        s = fmaf(LoBf16(hi), LoBf16(b1), s);
        s = fmaf(HiBf16(hi), HiBf16(b1), s);
        c[2 * half + j] += s;
      }
    }
  }
}

// c += A B (see the top of this file). `shuffle_form` forces the shuffle
// form on a device too (the self-test compares both).
__device__ __forceinline__ void MmaBf16(float c[4], const uint32_t a[4],
                                        const uint32_t b[2],
                                        bool shuffle_form = false) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (!shuffle_form) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    return;
  }
#endif
  MmaBf16Shuffle(c, a, b);
}

// A fragment of the 16 x 16 tile at m (row-major bf16, `pitch` elements
// between rows; pitch even, m 4-byte aligned).
__device__ __forceinline__ void LoadA(const uint16_t* m, int pitch,
                                      uint32_t a[4]) {
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const uint16_t* r0 = m + g * pitch + 2 * t;
  const uint16_t* r1 = r0 + 8 * pitch;
  a[0] = *reinterpret_cast<const uint32_t*>(r0);
  a[1] = *reinterpret_cast<const uint32_t*>(r1);
  a[2] = *reinterpret_cast<const uint32_t*>(r0 + 8);
  a[3] = *reinterpret_cast<const uint32_t*>(r1 + 8);
}

// B fragment of the 16 (k) x 8 (n) tile stored n-major at m: row n holds
// B[0..15][n] (`pitch` elements between rows), as a key tile K[key][dim] is
// B of S = Q K^T.
__device__ __forceinline__ void LoadBNMajor(const uint16_t* m, int pitch,
                                            uint32_t b[2]) {
  const int lane = threadIdx.x & 31;
  const uint16_t* r = m + (lane >> 2) * pitch + 2 * (lane & 3);
  b[0] = *reinterpret_cast<const uint32_t*>(r);
  b[1] = *reinterpret_cast<const uint32_t*>(r + 8);
}

// B fragment of the 16 (k) x 8 (n) tile stored k-major at m: row k holds
// B[k][0..7], as a value tile V[key][dim] is B of O = P V. Two 16-bit loads
// per register (rows 2t and 2t + 1 are `pitch` apart).
__device__ __forceinline__ void LoadBKMajor(const uint16_t* m, int pitch,
                                            uint32_t b[2]) {
  const int lane = threadIdx.x & 31;
  const uint16_t* r = m + 2 * (lane & 3) * pitch + (lane >> 2);
  b[0] = static_cast<uint32_t>(r[0]) | (static_cast<uint32_t>(r[pitch]) << 16);
  b[1] = static_cast<uint32_t>(r[8 * pitch]) |
         (static_cast<uint32_t>(r[9 * pitch]) << 16);
}

}  // namespace internal
}  // namespace cuda
}  // namespace pdserve

#endif  // PDSERVE_KERNELS_CUDA_SRC_MMA_CUH_
