#include "engine/service/handoff_shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace pdserve::service {
namespace {

constexpr absl::string_view kPrefix = "/pdserve-kv-";

std::string ErrnoText() { return std::strerror(errno); }

// Writes all of `data` to `fd` (tmpfs writes may be partial).
bool WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool ReadAll(int fd, char* out, size_t size) {
  while (size > 0) {
    const ssize_t n = read(fd, out, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string SharedMemoryHostId() {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (!std::getline(boot, boot_id) || boot_id.empty()) return "";
  struct stat shm {};
  if (stat("/dev/shm", &shm) != 0) return "";
  return absl::StrCat(absl::StripAsciiWhitespace(boot_id), ":",
                      static_cast<uint64_t>(shm.st_dev));
}

bool IsHandoffShmName(absl::string_view name) {
  return absl::StartsWith(name, kPrefix) && name.size() > kPrefix.size() &&
         name.size() < 200 &&
         std::count(name.begin(), name.end(), '/') == 1;
}

absl::Status WriteSharedMemory(const std::string& name,
                               absl::Span<const absl::string_view> parts) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("shm_open ", name, ": ", ErrnoText()));
  }
  bool ok = true;
  for (absl::string_view part : parts) ok = ok && WriteAll(fd, part);
  const std::string why = ok ? "" : ErrnoText();
  close(fd);
  if (!ok) {
    shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(
        absl::StrCat("writing shared memory ", name, ": ", why));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TakeSharedMemory(const std::string& name,
                                             int64_t bytes) {
  if (!IsHandoffShmName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' is not a KV hand-off's shared memory"));
  }
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) {
    const bool missing = errno == ENOENT;
    const std::string message =
        absl::StrCat("shared memory ", name, ": ", ErrnoText());
    return missing ? absl::NotFoundError(message)
                   : absl::UnavailableError(message);
  }
  shm_unlink(name.c_str());  // read once, whatever happens next
  struct stat st {};
  absl::StatusOr<std::string> out;
  if (fstat(fd, &st) != 0 || bytes < 0 || st.st_size != bytes) {
    out = absl::DataLossError(absl::StrCat(
        "shared memory ", name, " holds ", static_cast<int64_t>(st.st_size),
        " bytes; the hand-off's header promised ", bytes));
  } else {
    std::string data(static_cast<size_t>(bytes), '\0');
    if (ReadAll(fd, data.data(), data.size())) {
      out = std::move(data);
    } else {
      out = absl::DataLossError(
          absl::StrCat("reading shared memory ", name, ": ", ErrnoText()));
    }
  }
  close(fd);
  return out;
}

SharedMemoryLeases::~SharedMemoryLeases() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, put_ns] : leases_) shm_unlink(name.c_str());
}

std::string SharedMemoryLeases::NextName() {
  std::lock_guard<std::mutex> lock(mu_);
  return absl::StrCat(kPrefix, getpid(), "-", ++next_);
}

void SharedMemoryLeases::Add(std::string name, int64_t now_ns) {
  Sweep(now_ns);
  std::lock_guard<std::mutex> lock(mu_);
  leases_.emplace_back(std::move(name), now_ns);
}

void SharedMemoryLeases::Sweep(int64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  // An object the importer took is gone already: unlinking it again is a
  // harmless ENOENT. Only the expired ones are touched.
  auto expired = [&](const std::pair<std::string, int64_t>& lease) {
    if (now_ns - lease.second < ttl_ns_) return false;
    shm_unlink(lease.first.c_str());
    return true;
  };
  leases_.erase(std::remove_if(leases_.begin(), leases_.end(), expired),
                leases_.end());
}

int64_t SharedMemoryLeases::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(leases_.size());
}

}  // namespace pdserve::service
