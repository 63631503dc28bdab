// The plugin's one exported symbol (engine/backend/plugin_abi.h): a table
// whose functions wrap QueryDevice and CreateCudaRunner. Nothing throws
// across the boundary.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <exception>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/backend/plugin_abi.h"
#include "kernels/cuda/plugin/cuda_runner.h"

namespace {

using pdserve::cuda_runner::CreateCudaRunner;
using pdserve::cuda_runner::QueryDevice;
using pdserve::cuda_runner::RunnerOptions;

void WriteError(const std::string &msg, char *error, size_t error_size) {
  if (error == nullptr || error_size == 0) return;
  const size_t n = std::min(msg.size(), error_size - 1);
  std::memcpy(error, msg.data(), n);
  error[n] = '\0';
}

int32_t Fail(const absl::Status &s, char *error, size_t error_size) {
  WriteError(std::string(s.message()), error, error_size);
  return static_cast<int32_t>(s.code());
}

int32_t QueryDeviceImpl(int32_t device_index, PdserveDeviceInfo *info,
                        char *error, size_t error_size) {
  try {
    if (info == nullptr) {
      return Fail(absl::InvalidArgumentError("query_device: info is null"),
                  error, error_size);
    }
    auto d = QueryDevice(device_index);
    if (!d.ok()) return Fail(d.status(), error, error_size);
    info->free_bytes = d->free_bytes;
    info->total_bytes = d->total_bytes;
    info->compute_major = d->major;
    info->compute_minor = d->minor;
    const size_t n = std::min(d->name.size(), sizeof(info->name) - 1);
    std::memcpy(info->name, d->name.data(), n);
    info->name[n] = '\0';
    return 0;
  } catch (const std::exception &e) {
    return Fail(absl::InternalError(absl::StrCat("query_device: ", e.what())),
                error, error_size);
  } catch (...) {
    return Fail(absl::InternalError("query_device: unknown exception"), error,
                error_size);
  }
}

int32_t CreateBackendImpl(const PdserveBackendArgs *args,
                          pdserve::ForwardBackend **backend, char *error,
                          size_t error_size) {
  try {
    if (backend == nullptr) {
      return Fail(absl::InvalidArgumentError("create_backend: backend is null"),
                  error, error_size);
    }
    *backend = nullptr;
    constexpr size_t kNeed =
        offsetof(PdserveBackendArgs, max_batch_tokens) + sizeof(int64_t);
    if (args == nullptr || args->struct_size < kNeed ||
        args->weights == nullptr || args->geometry == nullptr) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
                      "create_backend: args missing or too short (struct_size ",
                      args == nullptr ? 0 : args->struct_size, ", need ", kNeed,
                      ") or null weights/geometry")),
                  error, error_size);
    }
    const RunnerOptions options =
        RunnerOptions::FromEnvironment(args->device_index);
    auto r = CreateCudaRunner(*args->weights, *args->geometry,
                              args->max_batch_tokens, options);
    if (!r.ok()) return Fail(r.status(), error, error_size);
    *backend = r->release();
    return 0;
  } catch (const std::exception &e) {
    return Fail(absl::InternalError(absl::StrCat("create_backend: ", e.what())),
                error, error_size);
  } catch (...) {
    return Fail(absl::InternalError("create_backend: unknown exception"), error,
                error_size);
  }
}

std::string BuildInfo() {
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  return absl::StrCat("CUDA runtime ", rt / 1000, ".", (rt % 1000) / 10,
                      ", built for sm_90, cuBLAS");
}

}  // namespace

extern "C" PDSERVE_PLUGIN_EXPORT const PdservePluginV1 *pdserve_backend_plugin(
    void) {
  static const std::string build_info = BuildInfo();
  static const PdservePluginV1 table = {
      PDSERVE_PLUGIN_ABI_VERSION,
      pdserve::PdservePluginLayoutFingerprint(),
      "cuda",
      build_info.c_str(),
      &QueryDeviceImpl,
      &CreateBackendImpl,
  };
  return &table;
}
