#include "engine/formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pdserve {
namespace {

absl::Status ErrnoStatus(const std::string& what, const std::string& path,
                         int err) {
  const std::string msg = absl::StrCat(path, ": ", what, ": ", strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

}  // namespace

absl::StatusOr<MappedFile> MapFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("cannot open", path, errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus("cannot stat", path, err);
  }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is a directory, expected a file"));
  }
  MappedFile file;
  file.size = static_cast<uint64_t>(st.st_size);
  if (file.size == 0) {
    close(fd);
    return file;
  }
  void* addr = mmap(nullptr, file.size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  close(fd);
  if (addr == MAP_FAILED) return ErrnoStatus("cannot mmap", path, err);
  const uint64_t size = file.size;
  file.owner = std::shared_ptr<const void>(
      addr, [size](const void* p) { munmap(const_cast<void*>(p), size); });
  file.data = static_cast<const uint8_t*>(addr);
  return file;
}

}  // namespace pdserve
