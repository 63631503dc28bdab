// Read-only memory mapping of a whole file.
#ifndef PDSERVE_ENGINE_FORMATS_MAPPED_FILE_H_
#define PDSERVE_ENGINE_FORMATS_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace pdserve {

// A private read-only mapping of `path`. `owner` unmaps when the last copy
// goes away; `data` is page-aligned (nullptr for an empty file, size 0).
// Copies share the mapping; safe to read from any thread.
struct MappedFile {
  std::shared_ptr<const void> owner;
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

// Maps `path`. NotFound / PermissionDenied / Internal name the path and the
// OS error. Directories are rejected with InvalidArgument.
absl::StatusOr<MappedFile> MapFile(const std::string& path);

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_FORMATS_MAPPED_FILE_H_
