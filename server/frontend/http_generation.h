// One HTTP generation request in flight: its choices (prompts x n samples)
// as GenerationStreams, answered as one JSON body or as an SSE stream in the
// endpoint's format (ApiFormat). Sample 0 of each prompt starts at once;
// samples 1..n-1 start when it has its first token, so they take the prompt
// from the prefix cache instead of computing it again.
#ifndef PDSERVE_SERVER_FRONTEND_HTTP_GENERATION_H_
#define PDSERVE_SERVER_FRONTEND_HTTP_GENERATION_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "server/frontend/api_types.h"
#include "server/frontend/generation_stream.h"
#include "server/http/http_server.h"

namespace pdserve::frontend {

// The Content-Type of every JSON response.
inline constexpr char kJsonContentType[] = "application/json";

// Thread-safe (the streams' callbacks come from gRPC threads). Keeps itself
// alive (through its streams' sinks) until every choice is done; `active`
// counts it until then.
class HttpGeneration : public std::enable_shared_from_this<HttpGeneration> {
 public:
  // `prompts` and `prepared` are parallel (one PreparedRequest each).
  static void Run(const GenerationContext& context,
                  std::unique_ptr<ApiFormat> format, ResponseMeta meta,
                  ApiRequest api, std::vector<PreparedRequest> prepared,
                  std::shared_ptr<http::ResponseWriter> out,
                  std::shared_ptr<std::atomic<int>> active,
                  GenerationStream::Clock::time_point start);

  ~HttpGeneration();

  // Sink events of choice `index`.
  void OnFirstToken(int index);
  void OnDelta(int index, v1::Delta delta);
  void OnDone(int index, const grpc::Status& status, const v1::Final& final);

 private:
  HttpGeneration() = default;
  void StartChoice(int index);
  // Starts samples 1..n-1 of the prompt of choice `index` (once).
  void StartSiblings(int index);
  void CancelAll();
  void StartStreamLocked();
  void FinishLocked();
  void RecordChoice(int index, const grpc::Status& status);

  GenerationContext context_;
  std::unique_ptr<ApiFormat> format_;
  ResponseMeta meta_;
  ApiRequest api_;
  std::vector<PreparedRequest> prepared_;
  std::shared_ptr<http::ResponseWriter> out_;
  std::shared_ptr<std::atomic<int>> active_;
  GenerationStream::Clock::time_point start_;

  std::mutex mu_;
  int total_ ABSL_GUARDED_BY(mu_) = 0;
  int done_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::shared_ptr<GenerationStream>> streams_ ABSL_GUARDED_BY(mu_);  // by choice
  std::vector<ChoiceResult> choices_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> siblings_started_ ABSL_GUARDED_BY(mu_);  // by prompt
  bool stream_started_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<ApiError> error_ ABSL_GUARDED_BY(mu_);
  v1::Final last_final_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_HTTP_GENERATION_H_
