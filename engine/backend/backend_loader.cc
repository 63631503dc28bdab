#include "engine/backend/backend_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/backend/cpu_backend.h"

#ifndef PDSERVE_BUILD_PLUGIN_DIR
#define PDSERVE_BUILD_PLUGIN_DIR ""
#endif

namespace pdserve {
namespace {

constexpr size_t kErrorBytes = 2048;

// absl::StatusCode from a plugin's int32 (unknown values -> UNKNOWN).
absl::Status PluginStatus(int32_t code, const char* error,
                          absl::string_view what) {
  absl::StatusCode c = absl::StatusCode::kUnknown;
  if (code > 0 &&
      code <= static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
    c = static_cast<absl::StatusCode>(code);
  }
  return absl::Status(
      c, absl::StrCat(what, ": ", error[0] ? error : "(no message)", " [code ",
                      code, "]"));
}

std::string ExeDir() {
  std::error_code ec;
  std::filesystem::path exe =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return exe.parent_path().string();
}

}  // namespace

std::vector<std::string> PluginSearchPaths(const DeviceSpec& device) {
  std::vector<std::string> paths;
  if (device.is_cpu()) return paths;
  if (const char* env = std::getenv("PDSERVE_CUDA_PLUGIN");
      env != nullptr && env[0] != '\0') {
    std::error_code ec;
    paths.push_back(
        std::filesystem::is_directory(env, ec)
            ? (std::filesystem::path(env) / kCudaPluginFileName).string()
            : std::string(env));
  }
  const std::string exe_dir = ExeDir();
  if (!exe_dir.empty()) {
    paths.push_back(
        (std::filesystem::path(exe_dir) / kCudaPluginFileName).string());
    paths.push_back((std::filesystem::path(exe_dir) / ".." / "lib" / "pdserve" /
                     kCudaPluginFileName)
                        .lexically_normal()
                        .string());
  }
  if (PDSERVE_BUILD_PLUGIN_DIR[0] != '\0') {
    paths.push_back(
        (std::filesystem::path(PDSERVE_BUILD_PLUGIN_DIR) / kCudaPluginFileName)
            .string());
  }
  return paths;
}

absl::StatusOr<const BackendPlugin*> LoadPluginFile(const std::string& path) {
  static std::mutex mu;
  static auto* loaded = new std::map<std::string, const BackendPlugin*>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = loaded->find(path); it != loaded->end()) return it->second;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": no such file"));
  }
  // RTLD_LOCAL: the plugin's symbols (cuBLAS, its copies of engine code) do
  // not leak into the process; RTLD_NODELETE: never unloaded (device
  // runtimes do not survive unloading).
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) {
    const char* err = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": dlopen failed: ", err ? err : "unknown error"));
  }
  dlerror();
  void* sym = dlsym(handle, PDSERVE_PLUGIN_ENTRY_SYMBOL);
  if (sym == nullptr) {
    const char* err = dlerror();
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": not a pdserve backend plugin (no symbol ",
        PDSERVE_PLUGIN_ENTRY_SYMBOL, ": ", err ? err : "null", ")"));
  }
  const PdservePluginV1* table = reinterpret_cast<PdservePluginEntryFn>(sym)();
  if (table == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": ", PDSERVE_PLUGIN_ENTRY_SYMBOL, " returned null"));
  }
  if (table->abi_version != PDSERVE_PLUGIN_ABI_VERSION) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": plugin ABI version ", table->abi_version,
                     " but this pdserve expects ", PDSERVE_PLUGIN_ABI_VERSION,
                     " (rebuild the plugin with this pdserve)"));
  }
  const uint64_t want = PdservePluginLayoutFingerprint();
  if (table->layout_fingerprint != want) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": plugin type-layout fingerprint ", table->layout_fingerprint,
        " but this pdserve has ", want,
        " (built from other headers; rebuild the plugin with this pdserve)"));
  }
  if (table->query_device == nullptr || table->create_backend == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": plugin table has a null function"));
  }
  const BackendPlugin* plugin = new BackendPlugin(path, table);
  loaded->emplace(path, plugin);
  return plugin;
}

absl::StatusOr<DeviceInfo> BackendPlugin::QueryDevice(
    int32_t device_index) const {
  PdserveDeviceInfo info{};
  char error[kErrorBytes] = {0};
  const int32_t code =
      table_->query_device(device_index, &info, error, sizeof(error));
  if (code != 0) {
    return PluginStatus(code, error,
                        absl::StrCat("device ", table_->name, ":", device_index,
                                     " (plugin ", path_, ")"));
  }
  DeviceInfo d;
  info.name[sizeof(info.name) - 1] = '\0';
  d.name = info.name;
  d.free_bytes = info.free_bytes;
  d.total_bytes = info.total_bytes;
  d.compute_major = info.compute_major;
  d.compute_minor = info.compute_minor;
  return d;
}

absl::StatusOr<std::unique_ptr<ForwardBackend>> BackendPlugin::CreateBackend(
    const ModelWeights& weights, const KvGeometry& geometry,
    int32_t device_index, int32_t num_threads, int64_t max_batch_tokens) const {
  PdserveBackendArgs args{};
  args.struct_size = sizeof(args);
  args.weights = &weights;
  args.geometry = &geometry;
  args.device_index = device_index;
  args.num_threads = num_threads;
  args.max_batch_tokens = max_batch_tokens;
  ForwardBackend* backend = nullptr;
  char error[kErrorBytes] = {0};
  const int32_t code =
      table_->create_backend(&args, &backend, error, sizeof(error));
  if (code != 0) {
    delete backend;  // a well-behaved plugin left it null
    return PluginStatus(
        code, error,
        absl::StrCat("creating the ", table_->name, ":", device_index,
                     " backend (plugin ", path_, ")"));
  }
  if (backend == nullptr) {
    return absl::InternalError(absl::StrCat(
        "plugin ", path_, " reported success but returned no backend"));
  }
  return std::unique_ptr<ForwardBackend>(backend);
}

absl::StatusOr<const BackendPlugin*> LoadBackendPlugin(
    const DeviceSpec& device, const BackendOptions& options) {
  if (device.is_cpu()) {
    return absl::InvalidArgumentError("the cpu device needs no plugin");
  }
  std::vector<std::string> paths =
      options.plugin_path.empty()
          ? PluginSearchPaths(device)
          : std::vector<std::string>{options.plugin_path};
  std::vector<std::string> why;
  for (const std::string& p : paths) {
    absl::StatusOr<const BackendPlugin*> plugin = LoadPluginFile(p);
    if (plugin.ok()) return plugin;
    why.push_back(std::string(plugin.status().message()));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "--device ", device.ToString(), " needs the CUDA plugin ",
      kCudaPluginFileName,
      " (built with pdserve when nvcc is found; set PDSERVE_CUDA_PLUGIN to "
      "its path); tried ",
      paths.size(), " location(s): ", absl::StrJoin(why, "; ")));
}

absl::StatusOr<DeviceInfo> QueryDevice(const DeviceSpec& device,
                                       const BackendOptions& options) {
  if (device.is_cpu()) {
    absl::StatusOr<int64_t> avail = ReadMemAvailableBytes();
    if (!avail.ok()) return avail.status();
    DeviceInfo d;
    d.name = "cpu";
    d.free_bytes = *avail;
    return d;
  }
  absl::StatusOr<const BackendPlugin*> plugin =
      LoadBackendPlugin(device, options);
  if (!plugin.ok()) return plugin.status();
  return (*plugin)->QueryDevice(device.index);
}

absl::StatusOr<std::unique_ptr<ForwardBackend>> CreateForwardBackend(
    const ModelWeights& weights, KvPool& pool, ThreadPool& threads,
    const DeviceSpec& device, const BackendOptions& options) {
  if (device.is_cpu()) {
    if (!pool.has_storage()) {
      return absl::FailedPreconditionError(
          "the CPU backend needs a KV pool with host storage (KvPoolMemory::"
          "kHost and at least one page)");
    }
    absl::StatusOr<std::unique_ptr<CpuBackend>> cpu = CpuBackend::Create(
        weights, pool.storage(), threads, options.max_batch_tokens);
    if (!cpu.ok()) return cpu.status();
    return std::unique_ptr<ForwardBackend>(std::move(*cpu));
  }
  absl::StatusOr<const BackendPlugin*> plugin =
      LoadBackendPlugin(device, options);
  if (!plugin.ok()) return plugin.status();
  return (*plugin)->CreateBackend(weights, pool.geometry(), device.index,
                                  threads.num_threads(),
                                  options.max_batch_tokens);
}

}  // namespace pdserve
