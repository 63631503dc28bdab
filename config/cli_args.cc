#include "config/cli_args.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pdserve::cli {

absl::StatusOr<CliArgs> CliArgs::Parse(int argc, char** argv,
                                       const std::vector<FlagSpec>& specs) {
  CliArgs args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      args.help_ = true;
      continue;
    }
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) {
      args.positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const FlagSpec* spec = nullptr;
    for (const auto& s : specs) {
      if (s.name == name) spec = &s;
    }
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (spec->takes_value && !has_value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, " needs a value"));
      }
      value = argv[++i];
    }
    args.values_[name] = spec->takes_value ? value : "1";
  }
  return args;
}

std::string CliArgs::Usage(const std::vector<FlagSpec>& specs) {
  std::string out;
  for (const auto& s : specs) {
    absl::StrAppend(&out, absl::StrFormat(
                              "  --%-22s %s\n",
                              s.takes_value ? s.name + " V" : s.name, s.help));
  }
  return out;
}

std::string CliArgs::String(const std::string& name,
                            const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

absl::StatusOr<int64_t> CliArgs::Int(const std::string& name,
                                     int64_t def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  int64_t v;
  if (!absl::SimpleAtoi(it->second, &v)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--%s: '%s' is not an integer", name, it->second));
  }
  return v;
}

absl::StatusOr<double> CliArgs::Double(const std::string& name,
                                       double def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  double v;
  if (!absl::SimpleAtod(it->second, &v)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s: '%s' is not a number", name, it->second));
  }
  return v;
}

}  // namespace pdserve::cli
