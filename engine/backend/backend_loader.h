// Creates the ForwardBackend for a DeviceSpec: the CPU backend in-process, or
// a device plugin (plugin_abi.h) loaded with dlopen(). The engine binaries
// never link a device runtime; libpdserve_cuda.so is found at run time.
//
// Plugin search order for cuda (the first file that loads wins):
//   1. $PDSERVE_CUDA_PLUGIN (a file, or a folder holding libpdserve_cuda.so)
//   2. the folder of the running binary (/proc/self/exe)
//   3. <that folder>/../lib/pdserve
//   4. the build tree (PDSERVE_BUILD_PLUGIN_DIR, baked in by CMake)
// BackendOptions::plugin_path, when set, replaces the whole list.
#ifndef PDSERVE_ENGINE_BACKEND_BACKEND_LOADER_H_
#define PDSERVE_ENGINE_BACKEND_BACKEND_LOADER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/device_spec.h"
#include "engine/backend/forward_backend.h"
#include "engine/backend/plugin_abi.h"
#include "engine/kv/kv_pool.h"
#include "engine/model_weights.h"
#include "kernels/thread_pool.h"

namespace pdserve {

// The file name of the CUDA plugin.
inline constexpr char kCudaPluginFileName[] = "libpdserve_cuda.so";

struct BackendOptions {
  int64_t max_batch_tokens = 2048;  // most tokens one Run carries
  // A plugin file to load instead of searching (tests, packaging).
  std::string plugin_path;
};

// Free memory and name of a device (the CPU: MemAvailable, "cpu").
struct DeviceInfo {
  std::string name;
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;  // 0 when unknown
  int32_t compute_major = 0;
  int32_t compute_minor = 0;
};

// A loaded plugin (process lifetime: plugins are never unloaded).
// Thread-safe: its functions may be called from any thread.
class BackendPlugin {
 public:
  const std::string& path() const { return path_; }
  const char* name() const { return table_->name; }
  const char* build_info() const { return table_->build_info; }
  absl::StatusOr<DeviceInfo> QueryDevice(int32_t device_index) const;
  absl::StatusOr<std::unique_ptr<ForwardBackend>> CreateBackend(
      const ModelWeights& weights, const KvGeometry& geometry,
      int32_t device_index, int32_t num_threads,
      int64_t max_batch_tokens) const;

 private:
  friend absl::StatusOr<const BackendPlugin*> LoadPluginFile(
      const std::string& path);
  BackendPlugin(std::string path, const PdservePluginV1* table)
      : path_(std::move(path)), table_(table) {}
  std::string path_;
  const PdservePluginV1* table_;
};

// The candidate files for the plugin of `device`, in search order
// (environment read now). Empty for the CPU.
std::vector<std::string> PluginSearchPaths(const DeviceSpec& device);

// dlopen()s one plugin file and checks its entry table. Cached per path: a
// second call returns the same object. Errors (FAILED_PRECONDITION): the
// dlerror() text; a missing entry symbol; an ABI version or layout
// fingerprint other than this build's (both numbers named).
absl::StatusOr<const BackendPlugin*> LoadPluginFile(const std::string& path);

// Loads the plugin for `device` (options.plugin_path, else the search list).
// FAILED_PRECONDITION naming every path tried and why each failed.
absl::StatusOr<const BackendPlugin*> LoadBackendPlugin(
    const DeviceSpec& device, const BackendOptions& options);

// Describes `device`: for the CPU MemAvailable (/proc/meminfo); for cuda the
// plugin's query (FAILED_PRECONDITION with the driver's text when there is
// no driver or device). What a fractional --kv-memory budget is taken of.
absl::StatusOr<DeviceInfo> QueryDevice(const DeviceSpec& device,
                                       const BackendOptions& options);

// Creates the backend for `device` over `pool`'s geometry. CPU: runs over
// pool.storage() with `threads` (both must outlive the backend). cuda: the
// plugin allocates its own KV memory for pool.geometry() on the device.
// `weights` must outlive the backend.
absl::StatusOr<std::unique_ptr<ForwardBackend>> CreateForwardBackend(
    const ModelWeights& weights, KvPool& pool, ThreadPool& threads,
    const DeviceSpec& device, const BackendOptions& options);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_BACKEND_BACKEND_LOADER_H_
