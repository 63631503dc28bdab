// Command-line flags for the benchmark harnesses: `--name value` (or a bare
// `--name` for a switch). Every flag must be declared, take its value, and a
// number must parse whole and lie within its bounds; `--help` prints the
// usage. A bad command line prints what is wrong plus the usage to stderr
// and exits 2 (`--help` exits 0), so a typo never runs a benchmark with
// defaults. Not thread-safe; the outputs are written during Parse only.
#ifndef PDSERVE_BENCH_BENCH_FLAGS_H_
#define PDSERVE_BENCH_BENCH_FLAGS_H_

#include <climits>
#include <string>
#include <vector>

namespace pdserve::bench {

class BenchFlags {
 public:
  // `usage`: the synopsis printed with --help and after an error.
  explicit BenchFlags(std::string usage) : usage_(std::move(usage)) {}

  BenchFlags& String(const char* name, std::string* out);
  BenchFlags& Int(const char* name, int* out, int min = INT_MIN,
                  int max = INT_MAX);
  BenchFlags& Double(const char* name, double* out, double min = -1e300);
  BenchFlags& Switch(const char* name, bool* out);  // no value: sets true

  // Parses argv[1..argc); exits as described above.
  void Parse(int argc, char** argv) const;

 private:
  enum class Kind { kString, kInt, kDouble, kSwitch };
  struct Flag {
    std::string name;  // with the leading "--"
    Kind kind;
    void* out;
    double min, max;
  };
  [[noreturn]] void Fail(const std::string& message) const;
  void Set(const Flag& flag, const char* value) const;

  std::string usage_;
  std::vector<Flag> flags_;
};

}  // namespace pdserve::bench

#endif  // PDSERVE_BENCH_BENCH_FLAGS_H_
