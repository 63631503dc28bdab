// Corpus replay for a fuzz target in a build without libFuzzer: runs
// LLVMFuzzerTestOneInput on every file named on the command line or found
// in a named folder, so the committed corpus (and every regression input)
// is checked by ctest in the normal build. An empty or missing corpus is a
// failure, so the replay cannot pass by reading nothing.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int RunFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  return LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                                bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  int inputs = 0;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      for (const fs::directory_entry& e : fs::directory_iterator(arg)) {
        if (!e.is_regular_file()) continue;
        RunFile(e.path());
        ++inputs;
      }
    } else if (fs::is_regular_file(arg, ec)) {
      RunFile(arg);
      ++inputs;
    } else {
      std::fprintf(stderr, "%s: no such corpus file or folder\n", argv[i]);
      return 1;
    }
  }
  if (inputs == 0) {
    std::fprintf(stderr, "no corpus inputs given\n");
    return 1;
  }
  std::printf("%d inputs replayed\n", inputs);
  return 0;
}
