// A small command-line parser for the local tools among the pdserve
// subcommands (chat, simulate); the serving processes take their flags
// through the flag tables (flag_table.h). Each tool declares its flags;
// absl::flags is not used because its flags are process-global and several
// subcommands share names (--port, --model).
#ifndef PDSERVE_CONFIG_CLI_ARGS_H_
#define PDSERVE_CONFIG_CLI_ARGS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pdserve::cli {

// Declared flag: a name without dashes, whether it takes a value, help text.
struct FlagSpec {
  std::string name;
  bool takes_value = true;
  std::string help;
};

// Parsed arguments: "--name value", "--name=value", boolean "--name", and
// positional arguments. Values are kept as text and converted on access.
// Plain value type.
class CliArgs {
 public:
  // INVALID_ARGUMENT for an unknown flag or a missing value. "--help"/"-h"
  // set help().
  static absl::StatusOr<CliArgs> Parse(int argc, char** argv,
                                       const std::vector<FlagSpec>& specs);
  // "  --name VALUE   help" lines.
  static std::string Usage(const std::vector<FlagSpec>& specs);

  bool help() const { return help_; }
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string String(const std::string& name, const std::string& def) const;
  // INVALID_ARGUMENT naming the flag and the text when it is not a number.
  absl::StatusOr<int64_t> Int(const std::string& name, int64_t def) const;
  absl::StatusOr<double> Double(const std::string& name, double def) const;
  bool Bool(const std::string& name) const { return Has(name); }
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  bool help_ = false;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

}  // namespace pdserve::cli

#endif  // PDSERVE_CONFIG_CLI_ARGS_H_
