// gRPC plumbing shared by the three pdserve processes: absl::Status <->
// grpc::Status mapping (one-to-one on codes), server start-up with the
// standard health service and reflection, loopback channels. (Signals and
// free ports: common/process/process.h.)
#ifndef PDSERVE_PROTO_RPC_UTIL_H_
#define PDSERVE_PROTO_RPC_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace pdserve::rpc {

// Trailing-metadata key a server puts on every status it ends a call with
// itself (value: the process, e.g. "scheduler"). A failed call without it
// broke in transport: the peer died or was unreachable.
inline constexpr absl::string_view kOriginKey = "pdserve-origin";

// Same code, same message.
grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);

// A started server and the port it bound.
struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

// OK for a TCP port (0..65535, 0 = any free one); else INVALID_ARGUMENT
// "--port N is outside 0..65535" (gRPC would listen on N modulo 2^16).
absl::Status CheckPort(int64_t port);

// Builds and starts a server on host:port (port 0 = any free port) with the
// given services, grpc.health.v1.Health (every service NOT_SERVING until the
// caller sets it) and server reflection. UNAVAILABLE names the address when
// it cannot be bound. The services must outlive the server.
absl::StatusOr<StartedServer> StartServer(
    const std::string& host, int64_t port,
    const std::vector<grpc::Service*>& services);

// Sets the health status of "" and of each named service.
void SetServing(grpc::Server& server, const std::vector<std::string>& services,
                bool serving);

// An insecure channel to host:port with keepalive tuned for loopback
// (dead peers noticed within about a second).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target);

}  // namespace pdserve::rpc

#endif  // PDSERVE_PROTO_RPC_UTIL_H_
