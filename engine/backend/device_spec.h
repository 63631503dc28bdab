// Where the engine runs a model: the host CPU or one CUDA device.
#ifndef PDSERVE_ENGINE_BACKEND_DEVICE_SPEC_H_
#define PDSERVE_ENGINE_BACKEND_DEVICE_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pdserve {

// A compute device: "cpu" (default), "cuda" (device 0) or "cuda:N". A plain
// value; `index` is meaningful for kCuda only (0 for kCpu).
struct DeviceSpec {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int32_t index = 0;

  bool is_cpu() const { return kind == Kind::kCpu; }
  std::string ToString() const;  // "cpu", "cuda:0"
  bool operator==(const DeviceSpec &o) const {
    return kind == o.kind && index == o.index;
  }
};

// Parses "cpu", "cuda", "cuda:N" (N a decimal in [0, 1023]); surrounding
// whitespace and letter case are ignored. INVALID_ARGUMENT quotes the text
// and lists the accepted forms.
absl::StatusOr<DeviceSpec> ParseDeviceSpec(absl::string_view text);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_BACKEND_DEVICE_SPEC_H_
