// `pdserve chat --target ADDR [MESSAGE]`: a streaming client of the public
// API. With MESSAGE: one reply, printed as it streams. Without: an
// interactive conversation (history kept; "/exit" or end of input quits).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pdserve/v1/api.grpc.pb.h"
#include "proto/rpc_util.h"
#include "config/tool_options.h"
#include "server/cli/command.h"

namespace pdserve::cli {
namespace {

using config::ChatOptions;

// Streams one reply to stdout; returns it, or the error status.
grpc::Status Stream(v1::Inference::Stub* stub, const v1::GenerateRequest& req,
                    bool stats, std::string* reply) {
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    if (resp.has_delta()) {
      std::fwrite(resp.delta().text().data(), 1, resp.delta().text().size(),
                  stdout);
      std::fflush(stdout);
      *reply += resp.delta().text();
    } else if (resp.has_final() && stats) {
      const v1::Final& f = resp.final();
      std::fprintf(stderr,
                   "\n[%s: %d prompt + %d completion tokens; queue %.1f ms, "
                   "ttft %.1f ms, decode %.1f ms]\n",
                   v1::FinishReason_Name(f.finish_reason()).c_str(),
                   f.usage().prompt_tokens(), f.usage().completion_tokens(),
                   f.timings().queue_ms(), f.timings().ttft_ms(),
                   f.timings().decode_ms());
    }
  }
  std::printf("\n");
  std::fflush(stdout);
  return reader->Finish();
}

// The request fields every turn shares.
v1::GenerateRequest BaseRequest(const ChatOptions& o) {
  v1::GenerateRequest req;
  req.set_max_tokens(static_cast<int32_t>(o.max_tokens));
  req.mutable_sampling()->set_temperature(static_cast<float>(o.temperature));
  req.mutable_sampling()->set_top_p(static_cast<float>(o.top_p));
  req.mutable_sampling()->set_top_k(static_cast<int32_t>(o.top_k));
  if (o.seed) req.mutable_sampling()->set_seed(static_cast<uint64_t>(*o.seed));
  if (!o.stop.empty()) req.add_stop(o.stop);
  return req;
}

int RunChat(int argc, char** argv) {
  const auto& table = config::ChatFlagTable();
  auto command =
      config::ParseCommand(table, argc, argv, config::Layers::Process());
  if (!command.ok()) {
    std::fprintf(stderr, "pdserve chat: %s\n",
                 std::string(command.status().message()).c_str());
    return 2;
  }
  if (command->resolution.help) {
    std::printf("usage: pdserve chat [--target ADDR] [options] [MESSAGE]\n%s",
                table.Usage().c_str());
    return 0;
  }
  const ChatOptions& o = command->options;
  const v1::GenerateRequest base = BaseRequest(o);
  auto channel = rpc::MakeChannel(o.target);
  // Connect first, retrying within the timeout: a fail-fast call made while
  // the first connection attempt is still in progress (a loaded machine, a
  // front end just started) would otherwise end UNAVAILABLE at once.
  if (!channel->WaitForConnected(
          std::chrono::system_clock::now() +
          std::chrono::milliseconds(
              static_cast<int64_t>(std::min(o.connect_timeout_s, 1e6) * 1000)))) {
    std::fprintf(stderr,
                 "pdserve chat: UNAVAILABLE: could not connect to %s within "
                 "%g s (--connect-timeout)\n",
                 o.target.c_str(), o.connect_timeout_s);
    return 1;
  }
  auto stub = v1::Inference::NewStub(channel);
  std::vector<v1::ChatMessage> history;
  if (!o.system.empty()) {
    v1::ChatMessage m;
    m.set_role("system");
    m.set_content(o.system);
    history.push_back(m);
  }
  auto ask = [&](const std::string& text) -> grpc::Status {
    v1::GenerateRequest req = base;
    if (o.raw) {
      req.set_prompt(text);
    } else {
      v1::ChatMessage user;
      user.set_role("user");
      user.set_content(text);
      history.push_back(user);
      for (const auto& m : history) *req.add_messages() = m;
    }
    std::string reply;
    grpc::Status s = Stream(stub.get(), req, o.stats, &reply);
    if (s.ok() && !o.raw) {
      v1::ChatMessage a;
      a.set_role("assistant");
      a.set_content(reply);
      history.push_back(a);
    } else if (!s.ok() && !o.raw) {
      history.pop_back();
    }
    if (!s.ok()) {
      std::fprintf(stderr, "pdserve chat: %s: %s\n",
                   absl::StatusCodeToString(static_cast<absl::StatusCode>(
                                                s.error_code()))
                       .c_str(),
                   s.error_message().c_str());
    }
    return s;
  };
  if (!command->resolution.positional.empty()) {
    std::string message;
    for (const auto& p : command->resolution.positional) {
      absl::StrAppend(&message, message.empty() ? "" : " ", p);
    }
    return ask(message).ok() ? 0 : 1;
  }
  std::string line;
  while (true) {
    std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line.empty()) continue;
    ask(line);
  }
  return 0;
}

}  // namespace

PDSERVE_COMMAND(chat, "stream a chat reply from a pdserve front end", RunChat);

}  // namespace pdserve::cli
