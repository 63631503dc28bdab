// KV hand-offs through shared memory, for a prefill engine and a decode
// engine on one host (`pdserve serve --cells N --prefill-cells P`, or two
// containers of one pod): the exporter writes the KV pages and the
// linear-attention state into one POSIX shared-memory object and sends only
// its name in the ExportKv header; the importer reads it and unlinks it.
// Both sides must see the same /dev/shm: SharedMemoryHostId names it.
#ifndef PDSERVE_ENGINE_SERVICE_HANDOFF_SHM_H_
#define PDSERVE_ENGINE_SERVICE_HANDOFF_SHM_H_

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace pdserve::service {

// "<kernel boot id>:<device of the /dev/shm mount>": equal for two
// processes exactly when a shared-memory name one creates is one the other
// can open. "" when either part cannot be read (no shared memory then).
std::string SharedMemoryHostId();

// Whether `name` is a name WriteSharedMemory makes ("/pdserve-kv-...", no
// other slash): what an importer accepts from a peer before opening it.
bool IsHandoffShmName(absl::string_view name);

// Creates shared-memory object `name` (O_EXCL, mode 0600) holding `parts`
// in order. On failure nothing is left behind.
absl::Status WriteSharedMemory(const std::string& name,
                               absl::Span<const absl::string_view> parts);

// Opens `name`, checks it holds exactly `bytes` bytes, reads them and
// unlinks it (whatever the outcome, so a bad object is not read twice).
// NOT_FOUND when it does not exist, DATA_LOSS when its size differs.
absl::StatusOr<std::string> TakeSharedMemory(const std::string& name,
                                             int64_t bytes);

// The exporter's objects not yet taken: each is unlinked when older than
// the TTL (Sweep), and all of them on destruction, so an importer that dies
// before reading leaks nothing. Thread-safe.
class SharedMemoryLeases {
 public:
  explicit SharedMemoryLeases(int64_t ttl_ns) : ttl_ns_(ttl_ns) {}
  ~SharedMemoryLeases();

  // A fresh name for this process ("/pdserve-kv-<pid>-<n>").
  std::string NextName();
  // Records `name`, created at `now_ns`; unlinks leases older than the TTL.
  void Add(std::string name, int64_t now_ns);
  void Sweep(int64_t now_ns);
  int64_t size() const;

 private:
  const int64_t ttl_ns_;
  mutable std::mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::pair<std::string, int64_t>> leases_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve::service

#endif  // PDSERVE_ENGINE_SERVICE_HANDOFF_SHM_H_
