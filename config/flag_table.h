// The configuration door of the pdserve processes: one flag table per
// process (name, type, default, help, setter into a typed options struct),
// resolved from four layers, lowest first:
//   1. the table's default
//   2. the JSON config file: --config FILE, else $PDSERVE_CONFIG, else
//      /etc/pdserve/pdserve.json when it exists; its "common" section and the
//      process's own section (keys are flag names)
//   3. the environment: PDSERVE_<SECTION>_<KEY> (KEY upper-cased, '-' -> '_'),
//      e.g. PDSERVE_ENGINE_PAGE_SIZE=32 (Kubernetes env / ConfigMaps)
//   4. the command line: --name VALUE, --name=VALUE, --flag for booleans
// so a flag beats the environment, which beats the file, which beats the
// default. Help text is generated from the table (Usage).
#ifndef PDSERVE_CONFIG_FLAG_TABLE_H_
#define PDSERVE_CONFIG_FLAG_TABLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pdserve::config {

enum class FlagType { kString, kInt, kDouble, kBool };

// Where a resolved value came from (later ones win).
enum class Source { kDefault, kFile, kEnv, kFlag };
const char* SourceName(Source source);  // "default" "config" "env" "flag"

// A typed value handed to a setter.
struct FlagValue {
  std::string text;  // as written (booleans: "true" / "false")
  int64_t i = 0;     // kInt
  double d = 0;      // kDouble (and kInt)
  bool b = false;    // kBool
};

// One table row without its setter: what help, the config-file check and
// `serve`'s forwarding need. `default_value` is written as on a command line;
// empty means "no default" (the setter is not called unless a layer sets
// the flag).
struct FlagInfo {
  std::string name;  // without dashes; also the JSON key and the env suffix
  FlagType type = FlagType::kString;
  std::string default_value;
  std::string help;
};

// A table row. `set` stores the value into the options struct; it returns
// INVALID_ARGUMENT (naming the numbers) for a value out of range.
template <typename Options>
struct Flag {
  FlagInfo info;
  std::function<absl::Status(const FlagValue&, Options*)> set;
};

// What the layers produced, before setters run: for each flag set by some
// layer (or with a default) its final text and source; the positional
// arguments; whether --help was given; the config file read ("" = none).
struct Resolution {
  struct Entry {
    std::string text;
    Source source = Source::kDefault;
  };
  std::map<std::string, Entry> values;
  std::vector<std::string> positional;
  bool help = false;
  std::string config_path;
};

// How the layers are read; the defaults read the real process environment
// and /etc/pdserve/pdserve.json. Tests inject their own.
struct Layers {
  // $NAME, or nullptr when unset.
  std::function<const char*(const char*)> getenv;
  // Tried in order when neither --config nor $PDSERVE_CONFIG is given; the
  // first that exists is read.
  std::vector<std::string> default_config_paths = {"/etc/pdserve/pdserve.json"};
  static Layers Process();
};

// "PDSERVE_ENGINE_PAGE_SIZE" for ("engine", "page-size").
std::string EnvName(const std::string& section, const std::string& name);

// Resolves argv[1..] against `infos` for `section`. Every table accepts
// --config FILE and --help. INVALID_ARGUMENT for an unknown flag, a missing
// value, a value that is not of the flag's type (naming the flag, the text
// and the layer: "env PDSERVE_ENGINE_PAGE_SIZE"), malformed JSON or an
// unknown key in the process's own config section; NOT_FOUND for an
// unreadable --config / $PDSERVE_CONFIG file.
absl::StatusOr<Resolution> Resolve(const std::vector<FlagInfo>& infos,
                                   const std::string& section, int argc,
                                   char** argv, const Layers& layers);

// Parses `text` as a value of `type`; INVALID_ARGUMENT "--name: 'x' is not
// an integer".
absl::StatusOr<FlagValue> ParseValue(const FlagInfo& info,
                                     const std::string& text);

// "  --page-size N   tokens per KV page (default 16; env PDSERVE_..)" lines.
std::string Usage(const std::vector<FlagInfo>& infos,
                  const std::string& section);

// A process's flag table: its config/env section and its rows.
template <typename Options>
struct FlagTable {
  std::string section;
  std::vector<Flag<Options>> flags;

  std::vector<FlagInfo> Infos() const {
    std::vector<FlagInfo> out;
    out.reserve(flags.size());
    for (const auto& f : flags) out.push_back(f.info);
    return out;
  }
  std::string Usage() const { return config::Usage(Infos(), section); }

  // Runs the setters of every resolved value, in table order. Errors name
  // the flag and where its value came from.
  absl::Status Apply(const Resolution& resolution, Options* options) const {
    for (const auto& f : flags) {
      auto it = resolution.values.find(f.info.name);
      if (it == resolution.values.end()) continue;
      absl::StatusOr<FlagValue> v = ParseValue(f.info, it->second.text);
      absl::Status s = v.ok() ? f.set(*v, options) : v.status();
      if (!s.ok()) {
        return absl::Status(
            s.code(), std::string(s.message()) +
                          (it->second.source == Source::kFlag
                               ? std::string()
                               : std::string(" (from ") +
                                     SourceName(it->second.source) +
                                     (it->second.source == Source::kEnv
                                          ? " " + EnvName(section, f.info.name)
                                          : std::string()) +
                                     ")"));
      }
    }
    return absl::OkStatus();
  }

  // The options with only the table's defaults applied.
  Options Defaults() const {
    Options o{};
    Resolution r;
    for (const auto& f : flags) {
      if (!f.info.default_value.empty()) {
        r.values[f.info.name] = {f.info.default_value, Source::kDefault};
      }
    }
    (void)Apply(r, &o);  // defaults are valid (config_test holds them so)
    return o;
  }
};

// A parsed command: its typed options, positional arguments, --help.
template <typename Options>
struct Command {
  Options options{};
  Resolution resolution;
};

// Resolve + Apply.
template <typename Options>
absl::StatusOr<Command<Options>> ParseCommand(const FlagTable<Options>& table,
                                              int argc, char** argv,
                                              const Layers& layers) {
  Command<Options> command;
  absl::StatusOr<Resolution> r =
      Resolve(table.Infos(), table.section, argc, argv, layers);
  if (!r.ok()) return r.status();
  command.resolution = std::move(*r);
  if (command.resolution.help) return command;
  absl::Status s = table.Apply(command.resolution, &command.options);
  if (!s.ok()) return s;
  return command;
}

}  // namespace pdserve::config

#endif  // PDSERVE_CONFIG_FLAG_TABLE_H_
