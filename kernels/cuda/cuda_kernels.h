// Host-callable launchers of pdserve's CUDA device kernels (the CUDA
// backend's compute layer; the device model runner strings them together).
//
// Conventions, for every function below:
// - Pointers are device pointers unless stated; sizes are element counts;
//   matrices are row-major with an explicit row stride in elements.
// - Each launcher only enqueues work on `stream` (no allocation, no
//   synchronisation, no host<->device copies), so all of them may be
//   captured in a CUDA graph. Device-side values (token ids, positions, page
//   ids) are range-checked in the kernels: an id outside its range is never
//   used to read or write memory (the row is written as zeros / skipped, as
//   stated per function).
// - Return value: cudaSuccess when the work was enqueued;
//   cudaErrorInvalidValue when a host-side precondition fails (unsupported
//   shape or type, null pointer, bad stride), with nothing enqueued; or the
//   launch error. LastErrorDetail() then describes the failure with the
//   numbers involved (thread-local, valid until the next failing call on the
//   same thread).
// - Arbitrary sizes (tails) are handled; nothing is read out of bounds.
// - Thread-safety: the free functions are thread-safe; CublasGemm is
//   thread-compatible (one caller at a time per object).
//
// Device KV cache: exactly the host KvStorage layout (engine/kv/kv_storage.h),
// f32:   [page][layer][0 = key, 1 = value][slot < page_size][kv_dim]
// with pages `page_stride_floats` apart, so the KV pool's page ids index the
// device cache 1:1 (the stride may be page_size * kv_dim * 2 * num_layers, or
// the host's rounded-up stride). Optionally the same layout in bf16
// (DeviceKvCache::type = KvType::kBF16): half the memory and the decode
// bandwidth; keys/values are rounded to bf16 when stored, math stays f32.
//
// This header includes only cuda_runtime_api.h, so .cc files compiled by the
// host compiler can use it; link pdserve_cuda_kernels.
#ifndef PDSERVE_KERNELS_CUDA_CUDA_KERNELS_H_
#define PDSERVE_KERNELS_CUDA_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pdserve {
namespace cuda {

// ---------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------

// Weight element types. Values are the GGML type ids, identical to
// pdserve::DType (kernels/dtype.h), so static_cast<WType>(dtype) converts.
// Quantized blocks are GGML's: 32 values, f16 scale (and f16 min for Q4_1).
enum class WType : int32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kBF16 = 30,
};

// A device weight matrix W[rows][cols] of `type`; row r starts at
// data + r * row_bytes. cols is a multiple of 32 for quantized types.
// Does not own the memory.
struct DeviceMatrix {
  WType type = WType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_bytes = 0;
  const void* data = nullptr;
};

// How RoPE pairs a head's dimensions (same as pdserve::RopeStyle).
enum class RopeMode : int32_t {
  kInterleaved = 0,  // pairs (2i, 2i + 1)
  kNeox = 1,         // pairs (i, i + rot_dims / 2)
};

// Half-precision storage for converted activations / dequantized weights.
enum class HalfType : int32_t { kF16 = 1, kBF16 = 30 };

// Description of the thread's last failing launcher call ("" when none).
const char* LastErrorDetail();

// Sets the kernels' shared-memory attributes (PrefillAttention, SampleRows)
// and caches the device's occupancy figures (DecodeAttention's split plan)
// for the CURRENT device. The launchers do this on first use per device;
// call it once per device before capturing launches in a CUDA graph.
cudaError_t PrepareKernels();

// ---------------------------------------------------------------------------
// Embedding, norms, element-wise
// ---------------------------------------------------------------------------

// out[r][0, table.cols) = dequantized row tokens[r] of `table` (any WType),
// r < n_rows, out rows `out_stride` floats apart. A token outside
// [0, table.rows) gives a row of zeros.
cudaError_t EmbeddingGather(const DeviceMatrix& table, const int32_t* tokens,
                            int64_t n_rows, float* out, int64_t out_stride,
                            cudaStream_t stream);

// For each row r < rows of n floats (rows `stride` apart in residual, add
// and out): if add != nullptr, residual[r] += add[r] (in place); then
// out[r] = residual[r] / sqrt(mean(residual[r]^2) + eps) * weight.
// out may equal add but not residual (unless add is nullptr).
cudaError_t RmsNormResidual(float* residual, const float* add,
                            const float* weight, float eps, int64_t rows,
                            int64_t n, int64_t stride, float* out,
                            cudaStream_t stream);

// Per-head RMSNorm in place (Qwen3 q/k norm): x is [rows][row_stride] with
// `heads` heads of head_dim floats at the start of each row; each head is
// normalised over head_dim and scaled by weight[head_dim].
cudaError_t HeadRmsNorm(float* x, int64_t rows, int64_t row_stride,
                        int64_t heads, int64_t head_dim, const float* weight,
                        float eps, cudaStream_t stream);

// cos/sin tables for RoPE: for r < rows and i < rot_dims / 2,
//   angle = float(positions[r]) * inv_freq_i,
//   inv_freq_i = 1 / powf(theta, float(2i) / float(rot_dims)),
// (the f32 formula of ForwardPass::PrepareRope), cos[r * half + i] and
// sin[r * half + i] with half = rot_dims / 2. rot_dims even, >= 2.
// (mRoPE or other schemes: compute the tables on the host and copy them.)
cudaError_t RopeCosSin(const int32_t* positions, int64_t rows, int64_t rot_dims,
                       float theta, float* cos, float* sin,
                       cudaStream_t stream);

// Rotates in place the first 2 * half dims of each of `heads` heads
// (head_dim floats each, at the start of each row of x, rows `row_stride`
// apart), with the per-row tables cos/sin [rows][half] from RopeCosSin.
// 2 * half <= head_dim. Same arithmetic as ForwardPass's RotateHeads.
cudaError_t ApplyRope(float* x, int64_t rows, int64_t row_stride, int64_t heads,
                      int64_t head_dim, int64_t half, const float* cos,
                      const float* sin, RopeMode mode, cudaStream_t stream);

// out[r][i] = silu(gate[r][i]) * up[r][i], i < n, r < rows; each operand has
// its own row stride. out may equal gate or up (same stride).
cudaError_t SwiGlu(const float* gate, int64_t gate_stride, const float* up,
                   int64_t up_stride, int64_t rows, int64_t n, float* out,
                   int64_t out_stride, cudaStream_t stream);

// y[i] += x[i], i < n.
cudaError_t AddInPlace(float* y, const float* x, int64_t n,
                       cudaStream_t stream);

// Gated attention: x[i] *= sigmoid(gate[i]), i < n.
cudaError_t SigmoidGate(float* x, const float* gate, int64_t n,
                        cudaStream_t stream);

// Splits q_proj output of gated attention: qg is [rows][heads][2][head_dim]
// (rows qg_stride apart: per head q then gate); writes q [rows][q_stride]
// and gate [rows][gate_stride], heads * head_dim floats each.
cudaError_t SplitQGate(const float* qg, int64_t qg_stride, int64_t rows,
                       int64_t heads, int64_t head_dim, float* q,
                       int64_t q_stride, float* gate, int64_t gate_stride,
                       cudaStream_t stream);

// ---------------------------------------------------------------------------
// Matrix products
// ---------------------------------------------------------------------------

// Most tokens MatVec takes per call.
inline constexpr int64_t kMaxMatVecTokens = 8;

// y[t][o] = sum_i W[o][i] * x[t][i], t < n_tokens (1..kMaxMatVecTokens),
// o < w.rows; every weight byte is read once per call for all tokens. Any
// WType; f32 accumulation (quantized blocks are dequantized to f32 exactly:
// no activation quantization). x rows x_stride floats apart, y rows
// y_stride apart; x and y must not overlap. Fast path (16-byte loads) when
// w.data and w.row_bytes are 16-byte aligned; correct for any alignment the
// type allows (2 bytes for f16/bf16/quantized, 4 for f32).
cudaError_t MatVec(const DeviceMatrix& w, const float* x, int64_t x_stride,
                   int64_t n_tokens, float* y, int64_t y_stride,
                   cudaStream_t stream);

// dst[r][c] = half(src[r][c]) (round to nearest even), r < rows, c < cols.
cudaError_t ConvertF32ToHalf(const float* src, int64_t src_stride, int64_t rows,
                             int64_t cols, HalfType type, void* dst,
                             int64_t dst_stride, cudaStream_t stream);

// Dequantizes/converts all of `w` (any WType) into a dense half matrix
// dst[w.rows][w.cols] (row stride w.cols), e.g. to run quantized weights
// through CublasGemm for prefill. f16 scales times int values are rounded
// once to `type`.
cudaError_t DequantizeToHalf(const DeviceMatrix& w, HalfType type, void* dst,
                             cudaStream_t stream);

// cuBLAS GEMM for prefill and batched decode (n_tokens > kMaxMatVecTokens):
//   y[t][o] = sum_i W[o][i] * x[t][i],  f32 output, f32 accumulation.
// W must be kF32 (cublasGemmEx with CUBLAS_COMPUTE_32F and the default math
// mode: no TF32, the exact path), kBF16 or kF16 (activations converted to
// the weight's type, tensor cores). Quantized weights: DequantizeToHalf
// first. Owns one cuBLAS handle (created on the device current at Init).
// Thread-compatible; not copyable.
class CublasGemm {
 public:
  CublasGemm() = default;
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

  // Creates the handle. cudaErrorInitializationError (detail: the cuBLAS
  // status) when cuBLAS fails. Idempotent.
  cudaError_t Init();

  // Bytes of `scratch` Run needs: the converted activations (0 for kF32).
  static int64_t ScratchBytes(WType type, int64_t cols, int64_t n_tokens);

  // f32 activations x [n_tokens][x_stride]; for half weights they are first
  // converted into scratch (ScratchBytes bytes, 16-byte aligned).
  cudaError_t Run(const DeviceMatrix& w, const float* x, int64_t x_stride,
                  int64_t n_tokens, float* y, int64_t y_stride, void* scratch,
                  int64_t scratch_bytes, cudaStream_t stream);

  // Half weights with activations already converted to w.type
  // (ConvertF32ToHalf; x_half [n_tokens][x_stride] halves), e.g. one
  // conversion shared by the q, k and v projections. w.type kBF16 or kF16.
  cudaError_t RunHalf(const DeviceMatrix& w, const void* x_half,
                      int64_t x_stride, int64_t n_tokens, float* y,
                      int64_t y_stride, cudaStream_t stream);

 private:
  void* handle_ = nullptr;  // cublasHandle_t
};

// ---------------------------------------------------------------------------
// Paged attention
// ---------------------------------------------------------------------------

// Element type of the device KV cache.
enum class KvType : int32_t { kF32 = 0, kBF16 = 1 };

// The device KV cache (layout at the top of this file). Not owned.
// For KvType::kBF16, `data` points at the bf16 storage (cast to float*) and
// page_stride_floats counts bf16 ELEMENTS; it must then be a multiple of 8
// and data 16-byte aligned (f32: a multiple of 4, 16-byte aligned).
struct DeviceKvCache {
  float* data = nullptr;
  int64_t num_layers = 0;
  int64_t kv_dim = 0;  // num_kv_heads * head_dim
  int64_t page_size = 0;
  int64_t num_pages = 0;
  int64_t page_stride_floats = 0;  // >= num_layers * 2 * page_size * kv_dim
  KvType type = KvType::kF32;
};

// One step's batch of sequences. Device arrays (int32), except the host
// fields at the end that size the grids (they must be upper bounds of the
// device values, else rows/keys beyond them are not computed).
//   q_start [num_seqs + 1]: sequence s owns rows [q_start[s], q_start[s+1])
//       of q / k / v / out (cu_seqlens); row t of s is position
//       start_pos[s] + t.
//   start_pos [num_seqs]: tokens of s already in the cache.
//   page_start [num_seqs + 1]: s's page table is
//       page_table[page_start[s] .. page_start[s+1]); entry i holds
//       positions [i * page_size, (i + 1) * page_size).
// Positions whose page-table entry is missing or outside [0, num_pages) are
// never read or written (StoreKv skips the row; attention treats such keys
// as absent).
struct AttentionBatch {
  int32_t num_seqs = 0;
  const int32_t* q_start = nullptr;
  const int32_t* start_pos = nullptr;
  const int32_t* page_start = nullptr;
  const int32_t* page_table = nullptr;
  int32_t max_q_len = 0;   // host: max over s of q_start[s+1] - q_start[s]
  int32_t max_kv_len = 0;  // host: max over s of start_pos[s] + q length
  int32_t total_rows = 0;  // host: q_start[num_seqs]
};

// Attention shape. head_dim must be 64, 128 or 256 (others:
// cudaErrorInvalidValue); num_heads a multiple of num_kv_heads; kv_dim of
// the cache == num_kv_heads * head_dim. scale 0 means 1 / sqrt(head_dim).
struct AttentionShape {
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 0.0f;
};

// Writes the new tokens' keys and values of `layer` into their pages: row
// r of sequence s (position p = start_pos[s] + r - q_start[s]) goes to page
// page_table[page_start[s] + p / page_size], slot p % page_size.
// k rows k_stride floats apart, v rows v_stride apart, kv_dim floats each
// (rounded to nearest even for a bf16 cache).
cudaError_t StoreKv(const DeviceKvCache& kv, int64_t layer,
                    const AttentionBatch& batch, const float* k,
                    int64_t k_stride, const float* v, int64_t v_stride,
                    cudaStream_t stream);

// Causal grouped-query attention of every new row over its sequence's
// cache positions [0, position] (StoreKv must have run for this layer):
// tiled, online softmax, f32 throughout. q and out are [total_rows][stride]
// with head h at h * head_dim; out may not alias q.
cudaError_t PrefillAttention(const DeviceKvCache& kv, int64_t layer,
                             const AttentionBatch& batch,
                             const AttentionShape& shape, const float* q,
                             int64_t q_stride, float* out, int64_t out_stride,
                             cudaStream_t stream);

// PrefillAttention's contract on bf16 tensor cores (mma.sync m16n8k16, f32
// accumulation), FlashAttention-2 tiling: 64 query rows against tiles of 64
// keys (32 for head_dim > 128) with an online softmax, so at most one tile
// of scores per row exists at a time (in registers; no score matrix in
// memory, any context length). Queries and keys/values are rounded to bf16
// (exact for a bf16 cache) and the probabilities are rounded to bf16 before
// they multiply V (the softmax denominator sums the rounded values), so
// outputs differ from PrefillAttention by up to ~3e-3 for values in
// [-1, 1] (more with an f32 cache: the keys' rounding moves the scores).
// Any head_dim in [1, 256] (computed at 64, 128 or 256 with zero padding;
// 64, 128 and 256 are the efficient ones). Same batch and cache contract as
// PrefillAttention; a bf16 cache with head_dim 64/128/256 needs
// page_stride_floats a multiple of 8.
cudaError_t FlashPrefillAttention(const DeviceKvCache& kv, int64_t layer,
                                  const AttentionBatch& batch,
                                  const AttentionShape& shape, const float* q,
                                  int64_t q_stride, float* out,
                                  int64_t out_stride, cudaStream_t stream);

// Self-test of the tensor-core tile FlashPrefillAttention is built from: one
// warp computes C = A B (A 16 x 16, B 16 x 8 as bf16 bits, row-major; f32
// products accumulated from zero) through the kernel's fragment loads, with
// B read k-major into c[0, 128) and n-major into c[128, 256) (each 16 x 8,
// row-major). shuffle_form computes the product with warp shuffles (the form
// the CPU emulator runs) instead of the mma instruction. Tests compare it
// with a host product to pin the fragment layout to the hardware.
cudaError_t MmaBf16Tile(const uint16_t* a, const uint16_t* b, float* c,
                        bool shuffle_form, cudaStream_t stream);

// Bytes of workspace DecodeAttention needs for this batch size and
// max_kv_len (the split partials; 0 when one split suffices or the shape is
// invalid). Depends on the current device (the split count fills whole
// waves of its SMs); for a fixed num_seqs it never decreases as max_kv_len
// grows, so a workspace sized at the longest context serves shorter ones.
int64_t DecodeAttentionWorkspaceBytes(const AttentionShape& shape,
                                      int32_t num_seqs, int32_t max_kv_len);

// Decode: every sequence has exactly ONE new row (q_start[s+1] ==
// q_start[s] + 1, not checked on the device; use PrefillAttention for other
// batches), attending over positions [0, start_pos[s]]. Flash-decoding: the
// KV length is split across blocks, each block serves all query heads of
// one KV head (K/V read once), and a combine kernel merges the partials.
// workspace: DecodeAttentionWorkspaceBytes(shape, num_seqs, max_kv_len)
// bytes, 16-byte aligned (batch.max_kv_len and num_seqs as passed here).
cudaError_t DecodeAttention(const DeviceKvCache& kv, int64_t layer,
                            const AttentionBatch& batch,
                            const AttentionShape& shape, const float* q,
                            int64_t q_stride, float* out, int64_t out_stride,
                            void* workspace, int64_t workspace_bytes,
                            cudaStream_t stream);

// ---------------------------------------------------------------------------
// Sampling
// ---------------------------------------------------------------------------

// Per-row sampling parameters (same fields and meaning as
// pdserve::DeviceSamplingParams in engine/backend/forward_backend.h and the
// CPU Sampler without penalties). temperature 0: greedy (argmax, ties to the
// lowest id). Otherwise softmax(logits / temperature) filtered by top_k
// (0 = off), top_p (1 = off; smallest most-likely prefix, ties by lower id,
// with mass >= top_p of the top-k mass), min_p (0 = off; p >= min_p * p_max),
// then drawn with Philox4x32-10 keyed by seed and counter `step`: the same
// (logits, params) always give the same token.
struct SampleParams {
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  uint64_t step = 0;
};

// For each row r < rows of logits [rows][stride] (vocab floats each):
// tokens[r] = the sampled token and logprobs[r] = logits[r][token] -
// logsumexp(logits[r]) (log-softmax of the raw logits). params is a device
// array [rows]. One block per row; vocab <= 2^30. logprobs may be null.
// Parameters outside their ranges (temperature < 0 or NaN, top_p outside
// (0, 1], min_p outside [0, 1], top_k < 0) are treated as greedy.
cudaError_t SampleRows(const float* logits, int64_t rows, int64_t vocab,
                       int64_t stride, const SampleParams* params,
                       int32_t* tokens, float* logprobs, cudaStream_t stream);

// ---------------------------------------------------------------------------
// Memory probe
// ---------------------------------------------------------------------------

// Reads every byte of buf[0, bytes) once (16-byte loads that do not stay in
// L2) and adds the sum of its little-endian 32-bit words to *sum (a device
// uint64; the caller zeroes it), so the sweep cannot be optimised away and a
// caller can check that all of it was read. buf 16-byte aligned, bytes a
// positive multiple of 16. The read kernel of the device bandwidth probe
// (kernels/cuda/plugin/read_probe.h).
cudaError_t ReadSweep(const void* buf, int64_t bytes, unsigned long long* sum,
                      cudaStream_t stream);

}  // namespace cuda
}  // namespace pdserve

#endif  // PDSERVE_KERNELS_CUDA_CUDA_KERNELS_H_
