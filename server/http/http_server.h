// A small asynchronous HTTP/1.1 server over Boost.Beast / Asio: keep-alive,
// a request body limit, complete responses and chunked server-sent-event
// streams, and notice of a client that goes away mid-response. A few IO
// threads serve every connection (no thread per connection or stream), so
// thousands of SSE streams stay open at once. Knows nothing of the APIs it
// serves: a Handler gets each request and answers through a ResponseWriter.
#ifndef PDSERVE_SERVER_HTTP_HTTP_SERVER_H_
#define PDSERVE_SERVER_HTTP_HTTP_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pdserve::http {

// One parsed request. Header names are lower case.
struct Request {
  std::string method;  // "GET", "POST", ...
  std::string path;    // target without the query
  std::string query;   // after '?', may be empty
  absl::flat_hash_map<std::string, std::string> headers;
  std::string body;
  // The header's value, or "" when absent.
  const std::string& Header(const std::string& lower_name) const;
};

using Headers = std::vector<std::pair<std::string, std::string>>;

// How a handler answers one request: either Respond once, or StartStream,
// any number of Write, then End. Thread-safe: every method may be called
// from any thread; the bytes go out in call order. Calls after the client
// went away (closed()) or after the response ended are ignored.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // A complete response with Content-Length.
  virtual void Respond(int status, absl::string_view content_type,
                       std::string body, Headers headers = {}) = 0;
  // Sends the status line and headers of a chunked response.
  virtual void StartStream(int status, absl::string_view content_type,
                           Headers headers = {}) = 0;
  // One chunk of a started stream (e.g. one SSE event).
  virtual void Write(std::string data) = 0;
  // The last chunk; the connection then serves its next request.
  virtual void End() = 0;
  // `fn` runs once (on an IO thread) when the client closes the connection
  // or a write fails before the response ended; at once if it already
  // happened. Set it before the work it cancels can finish.
  virtual void OnClientGone(std::function<void()> fn) = 0;
  virtual bool closed() const = 0;
};

// Called on an IO thread for each request; must not block (hand long work
// to other threads and answer through the writer later).
using Handler =
    std::function<void(Request request, std::shared_ptr<ResponseWriter> out)>;

// The answer for requests the server refuses itself (malformed, body over
// the limit): status and message in, (content type, body) out.
using ErrorBody = std::function<std::pair<std::string, std::string>(
    int status, const std::string& message)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = any free port
  int threads = 2;  // IO threads
  int64_t max_body_bytes = 8 << 20;  // larger bodies get 413
  int64_t max_header_bytes = 64 << 10;
  int idle_timeout_seconds = 120;  // keep-alive wait for the next request
  ErrorBody error_body;            // default: text/plain message
};

// Thread-safe. Stop (or the destructor) closes the listener and every open
// connection and joins the IO threads.
class Server {
 public:
  // INVALID_ARGUMENT for a bad host or option; UNAVAILABLE when the port
  // cannot be bound (naming host:port and the reason).
  static absl::StatusOr<std::unique_ptr<Server>> Start(ServerOptions options,
                                                       Handler handler);
  ~Server();
  int port() const;
  void Stop();

  class Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The reason phrase of an HTTP status ("Too Many Requests").
std::string StatusText(int status);

}  // namespace pdserve::http

#endif  // PDSERVE_SERVER_HTTP_HTTP_SERVER_H_
