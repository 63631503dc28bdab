// The binary interface between the engine and a compute-backend plugin (a
// shared library loaded with dlopen(), e.g. kernels/cuda/plugin ->
// libpdserve_cuda.so). The engine never links a device runtime: everything
// device-specific lives behind this one entry point.
//
// A plugin exports ONE symbol with C linkage, PDSERVE_PLUGIN_ENTRY_SYMBOL:
//
//   extern "C" PDSERVE_PLUGIN_EXPORT const PdservePluginV1*
//   pdserve_backend_plugin(void);
//
// returning a pointer to a static table (valid while the library is loaded;
// the engine never unloads it). The loader (engine/backend/backend_loader.h)
// checks, before calling anything else:
//   - abi_version == PDSERVE_PLUGIN_ABI_VERSION, and
//   - layout_fingerprint == PdservePluginLayoutFingerprint(): the sizes of the
//     C++ types that cross the boundary (ModelWeights, SequenceSpan, ...), so
//     a plugin built from another revision of those headers is refused
//     instead of misreading them.
// The C++ types that cross (ForwardBackend, ModelWeights, KvGeometry) are
// shared by pointer: the plugin must be built from the same headers with the
// same compiler and standard library (libstdc++, shared) and the same Abseil
// (shared) as the engine; the fingerprint is a guard, not a guarantee.
//
// Error convention: functions return an absl::StatusCode value as int32_t
// (0 = OK). On error they write a NUL-terminated message, at most
// error_size - 1 bytes, to `error` (the device's own error text, e.g.
// "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime
// version (cudaErrorInsufficientDriver)"). Recommended codes: 9
// FAILED_PRECONDITION (no driver / no device / index out of range), 8
// RESOURCE_EXHAUSTED (device memory), 3 INVALID_ARGUMENT (a model or geometry
// the plugin cannot run: name what), 12 UNIMPLEMENTED (a model family it does
// not support yet). No function may throw: catch everything at the boundary.
// Functions may be called from any thread, one at a time.
#ifndef PDSERVE_ENGINE_BACKEND_PLUGIN_ABI_H_
#define PDSERVE_ENGINE_BACKEND_PLUGIN_ABI_H_

#include <cstddef>
#include <cstdint>

#include "engine/backend/forward_backend.h"
#include "engine/kv/kv_pool.h"
#include "engine/model_weights.h"

// Bump on any change of the structs or functions below, or of the meaning of
// the C++ types they carry (ForwardBackend's virtual functions included).
#define PDSERVE_PLUGIN_ABI_VERSION 2  // 2: ForwardBackend::MeasureReadBandwidth
#define PDSERVE_PLUGIN_ENTRY_SYMBOL "pdserve_backend_plugin"
#define PDSERVE_PLUGIN_EXPORT __attribute__((visibility("default")))

extern "C" {

// What a device offers; filled by query_device.
struct PdserveDeviceInfo {
  int64_t free_bytes;     // free device memory now (cudaMemGetInfo)
  int64_t total_bytes;    // device memory in all
  int32_t compute_major;  // e.g. 9 for sm_90 (0 when not applicable)
  int32_t compute_minor;
  char name[256];  // NUL-terminated, e.g. "NVIDIA H200"
};

// Inputs of create_backend. The caller zero-initialises it and sets
// struct_size = sizeof(PdserveBackendArgs); fields may only be appended
// (a plugin reads the fields that fit in struct_size).
struct PdserveBackendArgs {
  uint32_t struct_size;
  // The model, host memory; outlives the backend. The plugin copies what it
  // needs to the device at creation (weights are not re-read per step).
  const pdserve::ModelWeights *weights;
  // The KV geometry the engine's KvPool accounts with (copy it). The backend
  // allocates storage for geometry->num_pages pages of geometry->page_size
  // tokens x num_layers attention layers x kv_dim (keys and values; it may
  // store them in any dtype/layout) and, for hybrid models,
  // geometry->max_sequences linear-attention state slots. SequenceSpan::
  // page_table entries are page ids in [0, num_pages) and state_slot is a
  // slot in [0, max_sequences); SequenceSpan::linear_state is host memory
  // the plugin must ignore.
  const pdserve::KvGeometry *geometry;
  int32_t device_index;      // "cuda:N" -> N
  int32_t num_threads;       // host threads it may use (0 = its choice)
  int64_t max_batch_tokens;  // most tokens one Run/RunAndSample carries
};

// The table a plugin exports (all fields set; function pointers non-null).
struct PdservePluginV1 {
  uint32_t abi_version;         // PDSERVE_PLUGIN_ABI_VERSION of its build
  uint64_t layout_fingerprint;  // PdservePluginLayoutFingerprint() of its build
  const char *name;             // "cuda"
  const char *build_info;       // free text, e.g. "CUDA 13.0, sm_90"
  // Reports device `device_index`. Must not allocate device memory beyond
  // what creating a context needs. FAILED_PRECONDITION with the driver's
  // text when there is no driver or no such device.
  int32_t (*query_device)(int32_t device_index, PdserveDeviceInfo *info,
                          char *error, size_t error_size);
  // Creates a backend for args; on success *backend is a new object the
  // CALLER owns and deletes (its virtual destructor frees every device
  // resource). On error *backend is left null.
  int32_t (*create_backend)(const PdserveBackendArgs *args,
                            pdserve::ForwardBackend **backend, char *error,
                            size_t error_size);
};

// The entry point's type (what dlsym(PDSERVE_PLUGIN_ENTRY_SYMBOL) gives).
typedef const PdservePluginV1 *(*PdservePluginEntryFn)(void);

}  // extern "C"

namespace pdserve {

// Sizes of the types shared by pointer, mixed into one number. Compiled into
// both sides; equal values are required to load a plugin.
constexpr uint64_t PdservePluginLayoutFingerprint() {
  const uint64_t sizes[] = {
      sizeof(ModelWeights),         sizeof(LayerWeights),
      sizeof(ExpertWeights),        sizeof(WeightView),
      sizeof(ModelConfig),          sizeof(KvGeometry),
      sizeof(SequenceSpan),         sizeof(ForwardStats),
      sizeof(DeviceSamplingParams), sizeof(SampledToken),
      sizeof(PdserveBackendArgs),   sizeof(PdserveDeviceInfo),
      sizeof(PdservePluginV1),      sizeof(ForwardBackend),
  };
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the sizes
  for (uint64_t s : sizes) {
    h ^= s;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_BACKEND_PLUGIN_ABI_H_
