#include "engine/backend/device_spec.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pdserve {

std::string DeviceSpec::ToString() const {
  if (kind == Kind::kCpu) return "cpu";
  return absl::StrCat("cuda:", index);
}

absl::StatusOr<DeviceSpec> ParseDeviceSpec(absl::string_view text) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", std::string(text), "' ", why,
                     "; expected cpu, cuda or cuda:N (N in [0, 1023])"));
  };
  DeviceSpec d;
  if (t == "cpu") return d;
  if (t == "cuda") {
    d.kind = DeviceSpec::Kind::kCuda;
    return d;
  }
  const std::string prefix = "cuda:";
  if (t.size() <= prefix.size() || t.compare(0, prefix.size(), prefix) != 0) {
    return bad("is not a known device");
  }
  const std::string digits = t.substr(prefix.size());
  int32_t index = -1;
  if (digits.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(digits, &index) || index < 0 || index > 1023) {
    return bad("has a bad device index");
  }
  d.kind = DeviceSpec::Kind::kCuda;
  d.index = index;
  return d;
}

}  // namespace pdserve
