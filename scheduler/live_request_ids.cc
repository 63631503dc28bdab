#include "scheduler/live_request_ids.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace pdserve::scheduler {
namespace {

class ReleasingSink : public EventSink {
 public:
  ReleasingSink(LiveRequestIds* ids, std::shared_ptr<EventSink> sink,
                std::string request_id, uint64_t handle)
      : ids_(ids),
        sink_(std::move(sink)),
        request_id_(std::move(request_id)),
        handle_(handle) {}
  void Send(const v1::TokenEvent& event) override { sink_->Send(event); }
  void Close(const grpc::Status& status) override {
    ids_->Release(request_id_, handle_);
    sink_->Close(status);
  }

 private:
  LiveRequestIds* ids_;
  std::shared_ptr<EventSink> sink_;
  std::string request_id_;
  uint64_t handle_;
};

}  // namespace

absl::Status LiveRequestIds::Claim(const std::string& request_id,
                                   uint64_t handle) {
  if (request_id.empty()) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = live_.try_emplace(request_id, handle);
  if (inserted) return absl::OkStatus();
  return absl::AlreadyExistsError(absl::StrCat(
      "request id \"", request_id, "\" belongs to a request still running at "
      "this scheduler (", live_.size(), " live); ids must be unique per front "
      "end, so this one is refused, not merged"));
}

void LiveRequestIds::Release(const std::string& request_id, uint64_t handle) {
  if (request_id.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(request_id);
  if (it != live_.end() && it->second == handle) live_.erase(it);
}

int64_t LiveRequestIds::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(live_.size());
}

std::shared_ptr<EventSink> LiveRequestIds::Releasing(
    std::shared_ptr<EventSink> sink, std::string request_id, uint64_t handle) {
  return std::make_shared<ReleasingSink>(this, std::move(sink),
                                         std::move(request_id), handle);
}

}  // namespace pdserve::scheduler
