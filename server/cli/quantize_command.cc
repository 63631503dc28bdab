// `pdserve quantize --model IN.gguf --type T --out OUT.gguf`: rewrites every
// weight matrix of a GGUF model in type T (Q8_0, Q4_0, Q4_1, F16, BF16,
// F32), keeping 1-D tensors F32 and all metadata.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "engine/formats/gguf.h"
#include "engine/formats/gguf_requantize.h"
#include "server/cli/command.h"

namespace pdserve::cli {
namespace {

constexpr char kUsage[] =
    "usage: pdserve quantize --model IN.gguf --type TYPE --out OUT.gguf\n"
    "  TYPE: Q8_0, Q4_0, Q4_1, F16, BF16 or F32. Every tensor of 2+ dims\n"
    "        is dequantized and requantized to TYPE (copied when already\n"
    "        TYPE; F16 when its rows are not whole TYPE blocks); 1-D\n"
    "        tensors are written F32. Metadata is copied, with\n"
    "        general.file_type updated.\n";

// Reads "--name VALUE" or "--name=VALUE" at argv[i]; advances i.
bool TakeFlag(const char* name, int argc, char** argv, int& i,
              std::string& out) {
  const size_t n = std::strlen(name);
  if (std::strcmp(argv[i], name) == 0 && i + 1 < argc) {
    out = argv[++i];
    return true;
  }
  if (std::strncmp(argv[i], name, n) == 0 && argv[i][n] == '=') {
    out = argv[i] + n + 1;
    return true;
  }
  return false;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "pdserve quantize: %s\n",
               std::string(s.message()).c_str());
  return 1;
}

int RunQuantize(int argc, char** argv) {
  std::string model, type_name, out;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (!TakeFlag("--model", argc, argv, i, model) &&
        !TakeFlag("--type", argc, argv, i, type_name) &&
        !TakeFlag("--out", argc, argv, i, out)) {
      std::fprintf(stderr, "pdserve quantize: unexpected argument '%s'\n%s",
                   argv[i], kUsage);
      return 2;
    }
  }
  if (model.empty() || type_name.empty() || out.empty()) {
    std::fprintf(stderr,
                 "pdserve quantize: --model, --type and --out are required\n%s",
                 kUsage);
    return 2;
  }
  absl::StatusOr<DType> type = ParseDTypeName(type_name);
  if (!type.ok()) {
    std::fprintf(stderr, "pdserve quantize: %s\n%s",
                 std::string(type.status().message()).c_str(), kUsage);
    return 2;
  }
  if (model == out) {
    std::fprintf(stderr, "pdserve quantize: --out must differ from --model\n");
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<GgufFile>> in = GgufFile::Open(model);
  if (!in.ok()) return Fail(in.status());
  absl::StatusOr<RequantizeStats> stats = RequantizeGguf(**in, *type, out);
  if (!stats.ok()) return Fail(stats.status());
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::fprintf(stderr,
               "pdserve quantize: wrote %s (%s): %lld matrices converted, "
               "%lld copied, %lld as F16 fallback, %lld vectors as F32; "
               "tensor data %.1f MB -> %.1f MB in %.1f s\n",
               out.c_str(), DTypeName(*type),
               static_cast<long long>(stats->converted),
               static_cast<long long>(stats->copied),
               static_cast<long long>(stats->fallback_f16),
               static_cast<long long>(stats->vectors), stats->in_bytes / 1e6,
               stats->out_bytes / 1e6, secs);
  return 0;
}

}  // namespace

PDSERVE_COMMAND(quantize, "rewrite a GGUF model's weights in another type",
                RunQuantize);

}  // namespace pdserve::cli
