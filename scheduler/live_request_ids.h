// The scheduler's registry of live request ids (SubmitRequest.request_id):
// a second submission under an id that is still live (e.g. from another
// front end that generated the same id) is refused with ALREADY_EXISTS
// instead of being served beside, or confused with, the first.
#ifndef PDSERVE_SCHEDULER_LIVE_REQUEST_IDS_H_
#define PDSERVE_SCHEDULER_LIVE_REQUEST_IDS_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "scheduler/scheduler_shell.h"

namespace pdserve::scheduler {

// Request id -> the handle of the live request holding it. Empty ids are
// not tracked (a caller that names none cannot be confused with another).
// Thread-safe; its own mutex, never held while calling out.
class LiveRequestIds {
 public:
  // Claims `request_id` for `handle`: ALREADY_EXISTS naming the id when a
  // live request holds it. Always OK for an empty id.
  absl::Status Claim(const std::string& request_id, uint64_t handle);
  // Frees `request_id` if `handle` holds it (else nothing).
  void Release(const std::string& request_id, uint64_t handle);
  int64_t size() const;

  // `sink` wrapped so that its Close first releases (request_id, handle):
  // the id is live exactly until the request's stream is closed. The
  // registry must outlive the returned sink.
  std::shared_ptr<EventSink> Releasing(std::shared_ptr<EventSink> sink,
                                       std::string request_id,
                                       uint64_t handle);

 private:
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, uint64_t> live_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve::scheduler

#endif  // PDSERVE_SCHEDULER_LIVE_REQUEST_IDS_H_
