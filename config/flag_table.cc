#include "config/flag_table.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace pdserve::config {
namespace {

const FlagInfo* Find(const std::vector<FlagInfo>& infos,
                     const std::string& name) {
  for (const auto& f : infos) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// The built-in rows every table has.
const FlagInfo kConfigFlag{"config", FlagType::kString, "",
                           "JSON config file (default: $PDSERVE_CONFIG, then "
                           "/etc/pdserve/pdserve.json if present)"};

absl::Status CheckType(const FlagInfo& info, const std::string& text,
                       const std::string& where) {
  absl::StatusOr<FlagValue> v = ParseValue(info, text);
  if (v.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(v.status().message(), " (from ", where, ")"));
}

// Text of a JSON value for a flag; booleans "true"/"false".
absl::StatusOr<std::string> JsonText(const nlohmann::json& v,
                                     const std::string& key) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return std::string(v.get<bool>() ? "true" : "false");
  if (v.is_number()) return v.dump();
  return absl::InvalidArgumentError(absl::StrCat(
      "config: \"", key, "\" must be a string, number or boolean"));
}

absl::Status ApplyFile(const std::vector<FlagInfo>& infos,
                       const std::string& section, const std::string& path,
                       Resolution* r) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read config ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("config ", path, ": ", e.what()));
  }
  if (!doc.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config ", path, ": the document must be an object"));
  }
  // "common" first, so the process's own section wins.
  for (const std::string& part : {std::string("common"), section}) {
    if (!doc.contains(part)) continue;
    const nlohmann::json& obj = doc[part];
    if (!obj.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config ", path, ": \"", part, "\" must be an object"));
    }
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      const FlagInfo* info = Find(infos, it.key());
      if (info == nullptr || it.key() == "config") {
        if (part == "common") continue;  // keys other processes use
        return absl::InvalidArgumentError(
            absl::StrCat("config ", path, ": unknown key \"", it.key(),
                         "\" in \"", part, "\""));
      }
      if (it.value().is_null()) continue;
      absl::StatusOr<std::string> text = JsonText(it.value(), it.key());
      if (!text.ok()) return text.status();
      if (absl::Status s = CheckType(*info, *text,
                                     absl::StrCat("config ", path));
          !s.ok()) {
        return s;
      }
      r->values[it.key()] = {*text, Source::kFile};
    }
  }
  return absl::OkStatus();
}

struct Argv {
  std::map<std::string, std::string> values;
  std::vector<std::string> positional;
  bool help = false;
};

absl::StatusOr<Argv> ParseArgv(const std::vector<FlagInfo>& infos, int argc,
                               char** argv) {
  Argv out;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      out.help = true;
      continue;
    }
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) {
      out.positional.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const FlagInfo* info = Find(infos, name);
    if (info == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (info->type == FlagType::kBool) {
      if (!has_value) value = "true";
    } else if (!has_value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, " needs a value"));
      }
      value = argv[++i];
    }
    if (absl::Status s = CheckType(*info, value, "the command line");
        !s.ok()) {
      return s;
    }
    out.values[name] = value;
  }
  return out;
}

}  // namespace

const char* SourceName(Source source) {
  switch (source) {
    case Source::kDefault:
      return "default";
    case Source::kFile:
      return "config";
    case Source::kEnv:
      return "env";
    case Source::kFlag:
      return "flag";
  }
  return "?";
}

Layers Layers::Process() {
  Layers l;
  l.getenv = [](const char* name) { return std::getenv(name); };
  return l;
}

std::string EnvName(const std::string& section, const std::string& name) {
  std::string out = absl::StrCat("PDSERVE_", section, "_", name);
  for (char& c : out) {
    c = c == '-' ? '_' : static_cast<char>(std::toupper(
                             static_cast<unsigned char>(c)));
  }
  return out;
}

absl::StatusOr<FlagValue> ParseValue(const FlagInfo& info,
                                     const std::string& text) {
  FlagValue v;
  v.text = text;
  switch (info.type) {
    case FlagType::kString:
      return v;
    case FlagType::kInt:
      if (!absl::SimpleAtoi(text, &v.i)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "--%s: '%s' is not an integer", info.name, text));
      }
      v.d = static_cast<double>(v.i);
      return v;
    case FlagType::kDouble:
      if (!absl::SimpleAtod(text, &v.d)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "--%s: '%s' is not a number", info.name, text));
      }
      return v;
    case FlagType::kBool: {
      const std::string t = absl::AsciiStrToLower(text);
      if (t == "true" || t == "1" || t == "yes") {
        v.b = true;
      } else if (t == "false" || t == "0" || t == "no") {
        v.b = false;
      } else {
        return absl::InvalidArgumentError(absl::StrFormat(
            "--%s: '%s' is not a boolean (true/false)", info.name, text));
      }
      v.text = v.b ? "true" : "false";
      return v;
    }
  }
  return v;
}

absl::StatusOr<Resolution> Resolve(const std::vector<FlagInfo>& table,
                                   const std::string& section, int argc,
                                   char** argv, const Layers& layers) {
  std::vector<FlagInfo> infos = table;
  if (Find(infos, "config") == nullptr) infos.push_back(kConfigFlag);
  absl::StatusOr<Argv> args = ParseArgv(infos, argc, argv);
  if (!args.ok()) return args.status();
  Resolution r;
  r.help = args->help;
  r.positional = args->positional;
  if (r.help) return r;
  for (const auto& f : infos) {
    if (!f.default_value.empty()) {
      r.values[f.name] = {f.default_value, Source::kDefault};
    }
  }
  // 2. the config file.
  std::string path;
  bool must_exist = true;
  if (auto it = args->values.find("config"); it != args->values.end()) {
    path = it->second;
  } else if (const char* env = layers.getenv ? layers.getenv("PDSERVE_CONFIG")
                                             : nullptr;
             env != nullptr && *env != '\0') {
    path = env;
  } else {
    must_exist = false;
    for (const std::string& p : layers.default_config_paths) {
      std::error_code ec;
      if (std::filesystem::exists(p, ec)) {
        path = p;
        break;
      }
    }
  }
  if (!path.empty()) {
    if (absl::Status s = ApplyFile(infos, section, path, &r); !s.ok()) {
      if (must_exist || s.code() != absl::StatusCode::kNotFound) return s;
    } else {
      r.config_path = path;
    }
  }
  // 3. the environment.
  if (layers.getenv) {
    for (const auto& f : infos) {
      if (f.name == "config") continue;
      const std::string env = EnvName(section, f.name);
      const char* value = layers.getenv(env.c_str());
      if (value == nullptr) continue;
      if (absl::Status s = CheckType(f, value, "env " + env); !s.ok()) {
        return s;
      }
      r.values[f.name] = {value, Source::kEnv};
    }
  }
  // 4. the command line.
  for (const auto& [name, value] : args->values) {
    r.values[name] = {value, Source::kFlag};
  }
  r.values.erase("config");
  return r;
}

std::string Usage(const std::vector<FlagInfo>& table,
                  const std::string& section) {
  std::vector<FlagInfo> infos = table;
  if (Find(infos, "config") == nullptr) infos.push_back(kConfigFlag);
  std::string out;
  for (const auto& f : infos) {
    const char* meta = f.type == FlagType::kInt      ? " N"
                       : f.type == FlagType::kDouble ? " X"
                       : f.type == FlagType::kBool   ? ""
                                                     : " V";
    std::string help = f.help;
    if (!f.default_value.empty() && f.type != FlagType::kBool) {
      absl::StrAppend(&help, " (default ", f.default_value, ")");
    }
    absl::StrAppend(&out, absl::StrFormat("  --%-24s %s\n", f.name + meta,
                                          help));
  }
  absl::StrAppend(&out, "Every flag can also be set in the \"", section,
                  "\" section of the config file or as ",
                  EnvName(section, "<flag>"),
                  " (flag > env > config file > default).\n");
  return out;
}

}  // namespace pdserve::config
