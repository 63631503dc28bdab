#include "bench/bench_flags.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pdserve::bench {

BenchFlags& BenchFlags::String(const char* name, std::string* out) {
  flags_.push_back({absl::StrCat("--", name), Kind::kString, out, 0, 0});
  return *this;
}

BenchFlags& BenchFlags::Int(const char* name, int* out, int min, int max) {
  flags_.push_back({absl::StrCat("--", name), Kind::kInt, out,
                    static_cast<double>(min), static_cast<double>(max)});
  return *this;
}

BenchFlags& BenchFlags::Double(const char* name, double* out, double min) {
  flags_.push_back({absl::StrCat("--", name), Kind::kDouble, out, min, 1e300});
  return *this;
}

BenchFlags& BenchFlags::Switch(const char* name, bool* out) {
  flags_.push_back({absl::StrCat("--", name), Kind::kSwitch, out, 0, 0});
  return *this;
}

void BenchFlags::Fail(const std::string& message) const {
  std::fprintf(stderr, "%s\nusage: %s\n", message.c_str(), usage_.c_str());
  std::exit(2);
}

void BenchFlags::Set(const Flag& flag, const char* value) const {
  switch (flag.kind) {
    case Kind::kString:
      *static_cast<std::string*>(flag.out) = value;
      return;
    case Kind::kSwitch:
      *static_cast<bool*>(flag.out) = true;
      return;
    case Kind::kInt: {
      int v = 0;
      if (!absl::SimpleAtoi(value, &v) || v < flag.min || v > flag.max) {
        Fail(absl::StrCat(
            flag.name, " wants an integer in [", static_cast<int64_t>(flag.min),
            ", ", static_cast<int64_t>(flag.max), "], got '", value, "'"));
      }
      *static_cast<int*>(flag.out) = v;
      return;
    }
    case Kind::kDouble: {
      double v = 0;
      if (!absl::SimpleAtod(value, &v) || !(v >= flag.min)) {
        Fail(absl::StrCat(flag.name, " wants a number >= ", flag.min, ", got '",
                          value, "'"));
      }
      *static_cast<double*>(flag.out) = v;
      return;
    }
  }
}

void BenchFlags::Parse(int argc, char** argv) const {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 ||
        std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: %s\n", usage_.c_str());
      std::exit(0);
    }
    const Flag* flag = nullptr;
    for (const Flag& f : flags_) {
      if (f.name == argv[i]) flag = &f;
    }
    if (flag == nullptr) Fail(absl::StrCat("unknown argument '", argv[i], "'"));
    if (flag->kind == Kind::kSwitch) {
      Set(*flag, nullptr);
      continue;
    }
    if (i + 1 >= argc) Fail(absl::StrCat(flag->name, " needs a value"));
    Set(*flag, argv[++i]);
  }
}

}  // namespace pdserve::bench
