// CudaRunner: creation, device memory, options. The step lives in
// runner_step.cc, the kernels' order in runner_forward.cc.
#include "kernels/cuda/plugin/cuda_runner.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/plugin/cuda_check.h"
#include "kernels/cuda/plugin/plugin_kernels.h"
#include "kernels/cuda/plugin/runner_internal.h"

namespace pdserve::cuda_runner {
namespace {

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  return (end != nullptr && *end == '\0') ? n : fallback;
}

const char* EnvString(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

RunnerOptions::QuantizedGemm ParseQuantizedGemm(const char* v) {
  const std::string s = v;
  if (s == "bf16") return RunnerOptions::QuantizedGemm::kBf16;
  if (s == "per_step") return RunnerOptions::QuantizedGemm::kPerStep;
  return RunnerOptions::QuantizedGemm::kAuto;
}

int64_t FloorPow2(int64_t n) {
  int64_t p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

absl::Status CheckSupported(const ModelConfig& c) {
  const char* what = nullptr;
  if (c.num_experts > 0) what = "mixture-of-experts layers";
  if (c.num_linear_layers() > 0)
    what = "Gated DeltaNet linear-attention layers";
  if (c.attn_output_gate) what = "gated attention output";
  if (!c.mrope_sections.empty()) what = "mRoPE";
  if (what != nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "the CUDA backend runs dense Llama / Qwen3 models only; model ", c.name,
        " has ", what, " (use --device cpu)"));
  }
  if (c.num_heads <= 0 || c.num_kv_heads <= 0 ||
      c.num_heads % c.num_kv_heads != 0 || c.head_dim <= 0 ||
      c.head_dim > 512 || c.rope_dims % 2 != 0 || c.rope_dims < 2 ||
      c.rope_dims > c.head_dim || c.hidden_size <= 0 || c.vocab_size <= 0 ||
      c.intermediate_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", c.name, ": shape the CUDA backend cannot run (", c.num_heads,
        " heads, ", c.num_kv_heads, " kv heads, head_dim ", c.head_dim,
        " (max 512), rope_dims ", c.rope_dims, ", hidden ", c.hidden_size,
        ", vocab ", c.vocab_size, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

RunnerOptions RunnerOptions::FromEnvironment(int32_t device_index) {
  RunnerOptions o;
  o.device_index = device_index;
  o.f32_to_bf16 = EnvInt("PDSERVE_CUDA_BF16", 0) != 0;
  o.use_graphs = EnvInt("PDSERVE_CUDA_GRAPHS", 1) != 0;
  o.matvec_max_tokens =
      std::max<int64_t>(1, EnvInt("PDSERVE_CUDA_MATVEC_TOKENS", 8));
  o.max_graph_batch =
      std::max<int64_t>(1, EnvInt("PDSERVE_CUDA_GRAPH_BATCH", 256));
  o.flash_attention_min_rows =
      std::max<int64_t>(0, EnvInt("PDSERVE_CUDA_FLASH_ROWS", 128));
  o.quantized_gemm = ParseQuantizedGemm(EnvString("PDSERVE_CUDA_QUANT_GEMM"));
  return o;
}

int32_t DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state
    return 0;
  }
  return n;
}

absl::StatusOr<DeviceDescription> QueryDevice(int32_t device_index) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorString(e), " (",
                     cudaGetErrorName(e), ")"));
  }
  if (device_index < 0 || device_index >= n) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", device_index, " does not exist (", n, " devices)"));
  }
  cudaDeviceProp prop;
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device_index));
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_index));
  size_t free_b = 0, total_b = 0;
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
  DeviceDescription d;
  d.name = prop.name;
  d.major = prop.major;
  d.minor = prop.minor;
  d.free_bytes = static_cast<int64_t>(free_b);
  d.total_bytes = static_cast<int64_t>(total_b);
  return d;
}

KvGeometry MakeGeometry(const ModelConfig& c, int64_t page_size,
                        int64_t num_pages, int64_t max_sequences,
                        KvDType dtype) {
  KvGeometry g;
  g.num_layers = c.num_kv_layers();
  g.kv_dim = c.kv_dim();
  g.head_dim = c.head_dim;
  g.dtype = dtype;
  g.page_size = page_size;
  g.bytes_per_token_per_layer =
      2 * c.kv_dim() * (dtype == KvDType::kF32 ? 4 : 2);
  g.bytes_per_token = g.num_layers * g.bytes_per_token_per_layer;
  g.bytes_per_page = g.bytes_per_token * page_size;
  g.num_pages = num_pages;
  g.total_tokens = num_pages * page_size;
  g.max_sequences = max_sequences;
  g.budget_bytes = g.bytes_per_page * num_pages;
  g.max_context = c.max_context;
  return g;
}

absl::StatusOr<std::unique_ptr<ForwardBackend>> CreateCudaRunner(
    const ModelWeights& weights, const KvGeometry& geometry,
    int64_t max_batch_tokens, const RunnerOptions& options) {
  auto r = CudaRunner::Create(weights, geometry, max_batch_tokens, options);
  if (!r.ok()) return r.status();
  return std::unique_ptr<ForwardBackend>(std::move(*r));
}

CudaRunner::CudaRunner(const ModelConfig& config, const RunnerOptions& options)
    : config_(config), options_(options) {}

absl::StatusOr<std::unique_ptr<CudaRunner>> CudaRunner::Create(
    const ModelWeights& weights, const KvGeometry& geometry,
    int64_t max_batch_tokens, const RunnerOptions& options) {
  const ModelConfig& c = weights.config;
  PDSERVE_RETURN_IF_ERROR(CheckSupported(c));
  if (static_cast<int64_t>(weights.layers.size()) != c.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", c.name, ": ", weights.layers.size(),
                     " layer weights for ", c.num_layers, " layers"));
  }
  if (geometry.num_layers != c.num_kv_layers() ||
      geometry.kv_dim != c.kv_dim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV geometry has ", geometry.num_layers, " layers of kv_dim ",
        geometry.kv_dim, "; model ", c.name, " needs ", c.num_kv_layers(),
        " layers of kv_dim ", c.kv_dim()));
  }
  if (geometry.dtype != KvDType::kF32 && geometry.dtype != KvDType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the CUDA backend stores its KV cache as f32 or bf16; got --kv-dtype ",
        KvDTypeName(geometry.dtype)));
  }
  if (geometry.page_size < 1 || geometry.num_pages < 1 ||
      geometry.num_pages >= 0x7fffffff) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV geometry: page_size ", geometry.page_size, ", ",
                     geometry.num_pages, " pages (need >= 1 each)"));
  }
  if (max_batch_tokens < 1 || max_batch_tokens > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batch_tokens must be in [1, 2^24], got ", max_batch_tokens));
  }
  PDSERVE_RETURN_IF_ERROR(QueryDevice(options.device_index).status());
  std::unique_ptr<CudaRunner> r(new CudaRunner(c, options));
  PDSERVE_RETURN_IF_ERROR(r->Init(weights, geometry, max_batch_tokens));
  return r;
}

absl::Status CudaRunner::Allocate(void** ptr, int64_t bytes, const char* what) {
  *ptr = nullptr;
  const cudaError_t e =
      cudaMalloc(ptr, static_cast<size_t>(std::max<int64_t>(bytes, 256)));
  if (e != cudaSuccess) {
    *ptr = nullptr;
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", bytes, " bytes of device memory for ", what, " (",
        free_b, " of ", total_b, " bytes free): ", cudaGetErrorString(e)));
  }
  device_allocs_.push_back(*ptr);
  return absl::OkStatus();
}

absl::Status CudaRunner::AllocatePinned(void** ptr, int64_t bytes,
                                        const char* what) {
  *ptr = nullptr;
  const cudaError_t e =
      cudaMallocHost(ptr, static_cast<size_t>(std::max<int64_t>(bytes, 256)));
  if (e != cudaSuccess) {
    *ptr = nullptr;
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", bytes, " bytes of pinned host memory for ", what,
        ": ", cudaGetErrorString(e)));
  }
  pinned_allocs_.push_back(*ptr);
  return absl::OkStatus();
}

absl::Status CudaRunner::Init(const ModelWeights& weights,
                              const KvGeometry& geometry,
                              int64_t max_batch_tokens) {
  const ModelConfig& c = config_;
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device_index));
  cudaDeviceProp prop;
  PDSERVE_CUDA_RETURN_IF_ERROR(
      cudaGetDeviceProperties(&prop, options_.device_index));
  description_ = absl::StrCat("cuda:", options_.device_index, " ", prop.name,
                              " (sm_", prop.major, prop.minor, ")");
  max_tokens_ = max_batch_tokens;
  num_pages_ = geometry.num_pages;
  page_size_ = geometry.page_size;
  const int64_t storage_tokens = num_pages_ * page_size_;
  max_positions_ = c.max_context > 0 ? std::min(storage_tokens, c.max_context)
                                     : storage_tokens;
  max_positions_ = std::min<int64_t>(max_positions_, 0x7fffffff);
  pt_capacity_ = num_pages_ + max_tokens_ + 1;
  graph_max_ = FloorPow2(std::min(options_.max_graph_batch, max_tokens_));
  lm_chunk_ =
      std::min(max_tokens_,
               std::max(graph_max_, (int64_t{64} << 20) / (c.vocab_size * 4)));

  auto model = DeviceModel::Upload(weights, options_.f32_to_bf16);
  if (!model.ok()) return model.status();
  model_ = std::move(*model);
  for (const DeviceLayer& l : model_->layers) {
    for (const cuda::DeviceMatrix* m :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      quantized_ |= m->type == cuda::WType::kQ8_0 ||
                    m->type == cuda::WType::kQ4_0 ||
                    m->type == cuda::WType::kQ4_1;
    }
  }
  const cuda::WType head_type = model_->lm_head.type;
  quantized_ |= head_type == cuda::WType::kQ8_0 ||
                head_type == cuda::WType::kQ4_0 ||
                head_type == cuda::WType::kQ4_1;

  PDSERVE_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  PDSERVE_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  for (int i = 0; i < 2; ++i) {
    for (cudaEvent_t* ev : {&input_copied_[i], &step_done_[i],
                            &logits_ready_[i], &logits_copied_[i]}) {
      PDSERVE_CUDA_RETURN_IF_ERROR(
          cudaEventCreateWithFlags(ev, cudaEventDisableTiming));
    }
  }
  PDSERVE_CUDA_RETURN_IF_ERROR(gemm_.Init());
  // Shared-memory attributes and occupancy figures of the kernel library,
  // set before any launch is captured in a graph.
  PDSERVE_CUDA_RETURN_IF_ERROR(cuda::PrepareKernels());

  // KV cache: the pool's pages plus one scratch page (padded graph rows).
  kv_.type = geometry.dtype == KvDType::kBF16 ? cuda::KvType::kBF16
                                              : cuda::KvType::kF32;
  kv_elem_bytes_ = kv_.type == cuda::KvType::kBF16 ? 2 : 4;
  kv_.num_layers = c.num_kv_layers();
  kv_.kv_dim = c.kv_dim();
  kv_.page_size = page_size_;
  kv_.num_pages = num_pages_ + 1;
  // Elements; a multiple of 8 keeps every page's bf16 rows 16-byte aligned.
  kv_.page_stride_floats =
      (kv_.num_layers * 2 * page_size_ * kv_.kv_dim + 7) / 8 * 8;
  const int64_t kv_bytes =
      kv_.num_pages * kv_.page_stride_floats * kv_elem_bytes_;
  void* kv = nullptr;
  PDSERVE_RETURN_IF_ERROR(Allocate(&kv, kv_bytes, "the KV cache"));
  kv_.data = static_cast<float*>(kv);
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(kv, 0, kv_bytes, compute_));

  shape_.num_heads = static_cast<int32_t>(c.num_heads);
  shape_.num_kv_heads = static_cast<int32_t>(c.num_kv_heads);
  shape_.head_dim = static_cast<int32_t>(c.head_dim);
  shape_.scale = 0.0f;
  const int64_t fb_smem = FallbackAttentionSmemBytes(shape_);
  if (fb_smem > static_cast<int64_t>(prop.sharedMemPerBlockOptin)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", c.name, ": attention with ", c.num_heads / c.num_kv_heads,
        " query heads per kv head of head_dim ", c.head_dim, " needs ", fb_smem,
        " bytes of shared memory, the device has ",
        prop.sharedMemPerBlockOptin));
  }
  if (fb_smem > 48 * 1024) {
    PDSERVE_CUDA_RETURN_IF_ERROR(PrepareFallbackAttention(fb_smem));
  }
  // The decode workspace for any batch size at the longest context (capped;
  // batches needing more use the prefill kernel).
  decode_ws_bytes_ = 0;
  for (int64_t n = 1; n <= std::min<int64_t>(max_tokens_, 65535); ++n) {
    decode_ws_bytes_ =
        std::max(decode_ws_bytes_, cuda::DecodeAttentionWorkspaceBytes(
                                       shape_, static_cast<int32_t>(n),
                                       static_cast<int32_t>(max_positions_)));
  }
  decode_ws_bytes_ = std::min<int64_t>(decode_ws_bytes_, int64_t{1} << 30);
  if (decode_ws_bytes_ > 0) {
    PDSERVE_RETURN_IF_ERROR(Allocate(&decode_ws_, decode_ws_bytes_,
                                     "the decode attention workspace"));
  }

  const int64_t t = max_tokens_;
  qkv_width_ = c.q_dim() + 2 * c.kv_dim();
  const int64_t half = c.rope_dims / 2;
  struct Buf {
    float** p;
    int64_t floats;
    const char* what;
  };
  for (const Buf& b : {Buf{&x_, t * c.hidden_size, "activations"},
                       Buf{&xn_, t * c.hidden_size, "activations"},
                       Buf{&qkv_, t * qkv_width_, "activations"},
                       Buf{&attn_, t * c.q_dim(), "activations"},
                       Buf{&gu_, t * 2 * c.intermediate_size, "activations"},
                       Buf{&proj_, t * c.hidden_size, "activations"},
                       Buf{&cos_, t * half, "RoPE tables"},
                       Buf{&sin_, t * half, "RoPE tables"},
                       Buf{&head_x_, lm_chunk_ * c.hidden_size, "LM head"},
                       Buf{&head_xn_, lm_chunk_ * c.hidden_size, "LM head"},
                       Buf{&logits_[0], lm_chunk_ * c.vocab_size, "logits"},
                       Buf{&logits_[1], lm_chunk_ * c.vocab_size, "logits"},
                       Buf{&logprobs_, t, "sampling"}}) {
    void* p = nullptr;
    PDSERVE_RETURN_IF_ERROR(Allocate(&p, b.floats * 4, b.what));
    *b.p = static_cast<float*>(p);
  }
  void* p = nullptr;
  PDSERVE_RETURN_IF_ERROR(Allocate(&p, t * 4, "sampling"));
  sampled_ = static_cast<int32_t*>(p);
  gemm_scratch_bytes_ = 0;
  if (t > options_.matvec_max_tokens) {
    for (cuda::WType wt :
         {cuda::WType::kBF16, cuda::WType::kF16, cuda::WType::kF32}) {
      gemm_scratch_bytes_ = std::max(
          gemm_scratch_bytes_,
          cuda::CublasGemm::ScratchBytes(wt, model_->max_in_features, t));
    }
    PDSERVE_RETURN_IF_ERROR(
        Allocate(&gemm_scratch_, gemm_scratch_bytes_, "GEMM activations"));
  }
  input_bytes_ = StepLayout::For(t, t).page_table + 4 * pt_capacity_;
  for (int i = 0; i < 2; ++i) {
    PDSERVE_RETURN_IF_ERROR(Allocate(&inputs_[i], input_bytes_, "step inputs"));
    PDSERVE_RETURN_IF_ERROR(
        AllocatePinned(&staging_[i], input_bytes_, "step inputs"));
    void* h = nullptr;
    PDSERVE_RETURN_IF_ERROR(
        AllocatePinned(&h, lm_chunk_ * c.vocab_size * 4, "logits"));
    host_logits_[i] = static_cast<float*>(h);
  }
  void* h = nullptr;
  PDSERVE_RETURN_IF_ERROR(AllocatePinned(&h, t * 4, "sampling"));
  host_sampled_ = static_cast<int32_t*>(h);
  PDSERVE_RETURN_IF_ERROR(AllocatePinned(&h, t * 4, "sampling"));
  host_logprobs_ = static_cast<float*>(h);
  // Last: kAuto gives the quantized matrices' bf16 copies only the memory
  // everything else left.
  PDSERVE_RETURN_IF_ERROR(PrepareQuantizedGemm());
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

absl::Status CudaRunner::PrepareQuantizedGemm() {
  // Quantized products of more than max(matvec_max_tokens, 32) rows take
  // the GEMM path (Linear); none when a step cannot be that large.
  const int64_t limit = std::max<int64_t>(options_.matvec_max_tokens, 32);
  if (!quantized_ || gemm_scratch_ == nullptr || max_tokens_ <= limit) {
    return absl::OkStatus();
  }
  using Q = RunnerOptions::QuantizedGemm;
  if (options_.quantized_gemm != Q::kPerStep) {
    const int64_t need = model_->QuantizedGemmCopyBytes();
    size_t free_b = 0, total_b = 0;
    PDSERVE_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
    const bool fits =
        need + kQuantizedCopyReserveBytes <= static_cast<int64_t>(free_b);
    if (fits || options_.quantized_gemm == Q::kBf16) {
      PDSERVE_RETURN_IF_ERROR(model_->ConvertQuantizedForGemm(compute_));
      absl::StrAppend(&description_, ", quantized GEMM weights as bf16 (",
                      need >> 20, " MiB)");
      return absl::OkStatus();
    }
  }
  absl::StrAppend(&description_,
                  ", quantized GEMM weights dequantized per step");
  return Allocate(&dequant_, model_->max_matrix_elems * 2,
                  "dequantized weights");
}

CudaRunner::~CudaRunner() {
  cudaSetDevice(options_.device_index);
  if (compute_ != nullptr) cudaStreamSynchronize(compute_);
  if (copy_ != nullptr) cudaStreamSynchronize(copy_);
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  for (cudaEvent_t ev : timing_events_) cudaEventDestroy(ev);
  for (void* p : device_allocs_) cudaFree(p);
  for (void* p : pinned_allocs_) cudaFreeHost(p);
  for (int i = 0; i < 2; ++i) {
    for (cudaEvent_t ev : {input_copied_[i], step_done_[i], logits_ready_[i],
                           logits_copied_[i]}) {
      if (ev != nullptr) cudaEventDestroy(ev);
    }
  }
  model_.reset();
  if (compute_ != nullptr) cudaStreamDestroy(compute_);
  if (copy_ != nullptr) cudaStreamDestroy(copy_);
}

}  // namespace pdserve::cuda_runner
