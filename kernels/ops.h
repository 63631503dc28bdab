// Element-wise and row-wise f32 operations of a transformer layer (CPU).
// All functions are pure and thread-compatible; pointers must not alias
// unless stated.
#ifndef PDSERVE_KERNELS_OPS_H_
#define PDSERVE_KERNELS_OPS_H_

#include <cstdint>

namespace pdserve {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i], i < n. out may equal x.
void RmsNorm(const float* x, const float* weight, float eps, int64_t n,
             float* out);

// How rotary embedding pairs the dimensions of a head.
enum class RopeStyle {
  kInterleaved,  // pairs (2i, 2i+1): Meta/llama2.c and GGUF "llama" layout
  kNeox,         // pairs (i, i + rot_dims/2): Hugging Face rotate_half layout
};

// Rotates, in place, the first rot_dims dimensions of each of n_heads heads
// of head_dim floats at x, for position `pos`, with frequencies
// theta^(-2i/rot_dims). rot_dims is even and <= head_dim.
void ApplyRope(float* x, int n_heads, int head_dim, int rot_dims, double pos,
               float theta, RopeStyle style);

// out[i] = silu(gate[i]) * up[i]. out may equal gate.
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

// out[i] = gelu_tanh(x[i]) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// computed as x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))) (the same
// function; within ~4e-7 relative of it) with the SIMD exp of SwiGlu: every
// element gets the same arithmetic wherever it sits in the array. out may
// equal x. Pure, thread-safe (torch's gelu(approximate='tanh')).
void GeluTanh(const float* x, int64_t n, float* out);

// In-place numerically stable softmax over n values.
void Softmax(float* x, int64_t n);

// log(sum_i exp(x[i])) for i < n, computed as max + log(sum exp(x - max))
// with the SIMD exp of Softmax (within ~2 ulp of expf) summed in double, so
// the result is within 1e-6 * (1 + |result|) of the exact value for any n
// (tested up to 2^17 values). n <= 0 gives -inf; a NaN input gives NaN; if
// the largest input is +inf or every input is -inf, that infinity. Pure,
// thread-safe; for the sampler's log-softmax: log p_i = x[i] - LogSumExp(x).
float LogSumExp(const float* x, int64_t n);

// The index of the first largest of x[0 .. n), exactly as the loop
// `best = 0; for i: if (x[i] > x[best]) best = i` picks it (NaNs never win,
// unless x[0] is NaN: then 0); 0 for n <= 0. Pure, thread-safe; for the
// sampler's greedy pick.
int64_t ArgMax(const float* x, int64_t n);

// y[i] += x[i].
void AddInPlace(float* y, const float* x, int64_t n);

// Dot product of two f32 vectors (SIMD where available).
float Dot(const float* a, const float* b, int64_t n);

// y[i] += a * x[i] (SIMD where available).
void Axpy(float a, const float* x, float* y, int64_t n);

}  // namespace pdserve

#endif  // PDSERVE_KERNELS_OPS_H_
