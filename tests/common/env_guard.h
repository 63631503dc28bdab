// EnvGuard: sets (or, with nullptr, unsets) one environment variable for the
// guard's lifetime and restores its previous value or absence on
// destruction. Not thread-safe (setenv): use from a test's own thread while
// no other thread reads the environment.
#ifndef PDSERVE_TESTS_COMMON_ENV_GUARD_H_
#define PDSERVE_TESTS_COMMON_ENV_GUARD_H_

#include <cstdlib>
#include <string>

namespace pdserve::testing {

class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name); old != nullptr) {
      old_ = old;
      had_ = true;
    }
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;
  ~EnvGuard() {
    if (had_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

}  // namespace pdserve::testing

#endif  // PDSERVE_TESTS_COMMON_ENV_GUARD_H_
