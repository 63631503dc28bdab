#include "proto/rpc_util.h"

#include <csignal>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"

namespace pdserve::rpc {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

absl::Status CheckPort(int64_t port) {
  if (port >= 0 && port <= 65535) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--port ", port, " is outside 0..65535"));
}

absl::StatusOr<StartedServer> StartServer(
    const std::string& host, int64_t port,
    const std::vector<grpc::Service*>& services) {
  if (absl::Status s = CheckPort(port); !s.ok()) return s;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  StartedServer started;
  const std::string address = absl::StrCat(host, ":", port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(),
                           &started.port);
  builder.SetMaxReceiveMessageSize(64 << 20);
  // Accept the clients' 1 s keepalive pings (MakeChannel) instead of
  // answering them with GOAWAY "too_many_pings".
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  for (grpc::Service* s : services) builder.RegisterService(s);
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || started.port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, " (port in use?)"));
  }
  return started;
}

void SetServing(grpc::Server& server, const std::vector<std::string>& services,
                bool serving) {
  grpc::HealthCheckServiceInterface* health = server.GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(serving);
  for (const auto& s : services) health->SetServingStatus(s, serving);
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Peers are local processes that a supervisor restarts within a fraction
  // of a second: reconnect soon and often (a refused loopback connect
  // costs microseconds), so a stream resumes as soon as its peer is back.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 250);
  args.SetMaxReceiveMessageSize(64 << 20);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                   args);
}

}  // namespace pdserve::rpc
