// Row builders for flag tables (flag_table.h), shared by the process tables
// (process_flags.cc) and the local tools' tables (tool_flags.cc). Each
// returns a Flag<O> whose setter stores into a member of O and refuses a
// value out of range with INVALID_ARGUMENT naming the flag and the numbers.
// Internal to pdserve_config; header-only templates, no state.
#ifndef PDSERVE_CONFIG_FLAG_ROWS_H_
#define PDSERVE_CONFIG_FLAG_ROWS_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "config/flag_table.h"

namespace pdserve::config::rows {

constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();

inline absl::Status OutOfRange(const std::string& name, const FlagValue& v,
                               int64_t lo, int64_t hi) {
  if (hi == kNoMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " ", v.text, " must be >= ", lo));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", name, " ", v.text, " is outside ", lo, "..", hi));
}

// Row builders; O is deduced from the member pointer.
template <typename O>
Flag<O> Str(std::string name, std::string def, std::string help,
            std::string O::*field) {
  return {{std::move(name), FlagType::kString, std::move(def), std::move(help)},
          [field](const FlagValue& v, O* o) {
            o->*field = v.text;
            return absl::OkStatus();
          }};
}

template <typename O>
Flag<O> Int(std::string name, std::string def, std::string help,
            int64_t O::*field, int64_t lo = 0, int64_t hi = kNoMax) {
  return {{name, FlagType::kInt, std::move(def), std::move(help)},
          [field, lo, hi, name](const FlagValue& v, O* o) {
            if (v.i < lo || v.i > hi) return OutOfRange(name, v, lo, hi);
            o->*field = v.i;
            return absl::OkStatus();
          }};
}

template <typename O>
Flag<O> Real(std::string name, std::string def, std::string help,
             double O::*field, double lo, bool lo_inclusive) {
  return {{name, FlagType::kDouble, std::move(def), std::move(help)},
          [field, lo, lo_inclusive, name](const FlagValue& v, O* o) {
            if (!std::isfinite(v.d) || v.d < lo || (!lo_inclusive && v.d == lo)) {
              return absl::InvalidArgumentError(
                  absl::StrCat("--", name, " ", v.text, " must be a number ",
                               lo_inclusive ? ">= " : "> ", lo));
            }
            o->*field = v.d;
            return absl::OkStatus();
          }};
}

template <typename O>
Flag<O> Bool(std::string name, std::string help, bool O::*field,
             bool invert = false) {
  return {{std::move(name), FlagType::kBool, "false", std::move(help)},
          [field, invert](const FlagValue& v, O* o) {
            o->*field = v.b != invert;
            return absl::OkStatus();
          }};
}

// A number with no table default: the member stays empty unless a layer
// sets the flag (help says what empty means).
template <typename O>
Flag<O> OptionalReal(std::string name, std::string help,
                     std::optional<double> O::*field, double lo) {
  return {{name, FlagType::kDouble, "", std::move(help)},
          [field, lo, name](const FlagValue& v, O* o) {
            if (!std::isfinite(v.d) || v.d < lo) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "--", name, " ", v.text, " must be a number >= ", lo));
            }
            o->*field = v.d;
            return absl::OkStatus();
          }};
}

}  // namespace pdserve::config::rows

#endif  // PDSERVE_CONFIG_FLAG_ROWS_H_
