// The OpenAI- and Anthropic-compatible HTTP API of the front end, on the
// same request path as the gRPC API: each generation is parsed
// (openai_api.h / anthropic_api.h), validated and tokenized by
// PrepareRequest, run as GenerationStreams (n samples of a prompt: the first
// computes the prompt, the others start once it has its first token and
// take the prompt from the prefix cache), and answered as JSON or SSE. A
// client that closes the connection cancels its streams like a cancelled
// gRPC call.
//
// Routes: POST /v1/chat/completions, /v1/completions, /v1/messages,
// /v1/messages/count_tokens, /tokenize, /detokenize; GET /v1/models,
// /health (200 ready, 503 not ready or draining), /version.
#ifndef PDSERVE_SERVER_FRONTEND_HTTP_API_H_
#define PDSERVE_SERVER_FRONTEND_HTTP_API_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/frontend/generation_stream.h"
#include "server/http/http_server.h"

namespace pdserve::frontend {

struct HttpApiOptions {
  // Accepted keys (Authorization: Bearer KEY, or x-api-key: KEY); empty =
  // no authentication. /health and /version are always open.
  std::vector<std::string> api_keys;
};

// Thread-safe; the context's pointers must outlive it and every request it
// started (active() == 0).
class HttpApi {
 public:
  HttpApi(const GenerationContext& context, HttpApiOptions options);

  // The http::Handler.
  void Handle(http::Request request, std::shared_ptr<http::ResponseWriter> out);

  // Readiness (the engine is up) and draining (SIGTERM): generation routes
  // get 503 unless ready and not draining; /health follows the same.
  void SetReady(bool ready) { ready_ = ready; }
  void SetDraining(bool draining) { draining_ = draining; }
  // Generation requests not yet answered in full.
  int active() const { return active_->load(); }

 private:
  void Generate(const std::string& route, const http::Request& request,
                const std::shared_ptr<http::ResponseWriter>& out);
  void CountTokens(const http::Request& request,
                   const std::shared_ptr<http::ResponseWriter>& out);
  void Tokenize(const http::Request& request,
                const std::shared_ptr<http::ResponseWriter>& out);
  void Detokenize(const http::Request& request,
                  const std::shared_ptr<http::ResponseWriter>& out);
  bool Authorized(const http::Request& request) const;

  GenerationContext context_;
  HttpApiOptions options_;
  std::atomic<bool> ready_{false}, draining_{false};
  std::shared_ptr<std::atomic<int>> active_ =
      std::make_shared<std::atomic<int>>(0);
};

// Constant-time comparison of an offered key with each accepted key (the
// time depends only on the lengths of the accepted keys).
bool ApiKeyMatches(const std::string& offered,
                   const std::vector<std::string>& keys);

// The keys of --api-key (comma-separated) and of --api-key-file (one a
// line; blank lines and lines starting with '#' skipped). INVALID_ARGUMENT
// when the file cannot be read or holds no key.
absl::StatusOr<std::vector<std::string>> LoadApiKeys(
    const std::string& keys_flag, const std::string& key_file);

}  // namespace pdserve::frontend

#endif  // PDSERVE_SERVER_FRONTEND_HTTP_API_H_
