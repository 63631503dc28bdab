// `pdserve chat --target ADDR [MESSAGE]`: a streaming client of the public
// API. With MESSAGE: one reply, printed as it streams. Without: an
// interactive conversation (history kept; "/exit" or end of input quits).
#include <cstdio>
#include <iostream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pdserve/v1/api.grpc.pb.h"
#include "proto/rpc_util.h"
#include "config/cli_args.h"
#include "server/cli/command.h"

namespace pdserve::cli {
namespace {

const std::vector<FlagSpec>& Flags() {
  static const auto* flags = new std::vector<FlagSpec>{
      {"target", true, "front end address (default 127.0.0.1:50051)"},
      {"max-tokens", true, "most tokens per reply (default: the rest of the capacity)"},
      {"temperature", true, "sampling temperature (default 0 = greedy)"},
      {"top-p", true, "nucleus sampling mass"},
      {"top-k", true, "top-k sampling"},
      {"seed", true, "sampling seed"},
      {"system", true, "system message"},
      {"stop", true, "a stop string"},
      {"raw", false, "send MESSAGE as a raw prompt (no chat template)"},
      {"stats", false, "print finish reason, usage and timings on stderr"},
  };
  return *flags;
}

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

absl::Status Configure(const CliArgs& args, v1::GenerateRequest* req) {
  auto max_tokens = args.Int("max-tokens", 0);
  auto temperature = args.Double("temperature", 0);
  auto top_p = args.Double("top-p", 0);
  auto top_k = args.Int("top-k", 0);
  for (const absl::Status& s : {max_tokens.status(), temperature.status(),
                                top_p.status(), top_k.status()}) {
    if (!s.ok()) return s;
  }
  // Ranges the server checks against the model come back from it with the
  // numbers; what would not survive the wire's 32-bit fields is refused here.
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t>{"--max-tokens", *max_tokens},
        std::pair<const char*, int64_t>{"--top-k", *top_k}}) {
    if (value < 0 || value > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " ", value, " must be in [0, ",
          std::numeric_limits<int32_t>::max(), "]"));
    }
  }
  req->set_max_tokens(static_cast<int32_t>(*max_tokens));
  req->mutable_sampling()->set_temperature(static_cast<float>(*temperature));
  req->mutable_sampling()->set_top_p(static_cast<float>(*top_p));
  req->mutable_sampling()->set_top_k(static_cast<int32_t>(*top_k));
  if (args.Has("seed")) {
    auto seed = args.Int("seed", 0);
    if (!seed.ok()) return seed.status();
    req->mutable_sampling()->set_seed(static_cast<uint64_t>(*seed));
  }
  if (args.Has("stop")) req->add_stop(args.String("stop", ""));
  return absl::OkStatus();
}

int RunChat(int argc, char** argv) {
  auto args = CliArgs::Parse(argc, argv, Flags());
  if (!args.ok()) {
    std::fprintf(stderr, "pdserve chat: %s\n",
                 std::string(args.status().message()).c_str());
    return 2;
  }
  if (args->help()) {
    std::printf("usage: pdserve chat [--target ADDR] [options] [MESSAGE]\n%s",
                CliArgs::Usage(Flags()).c_str());
    return 0;
  }
  v1::GenerateRequest base;
  if (absl::Status s = Configure(*args, &base); !s.ok()) {
    std::fprintf(stderr, "pdserve chat: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto stub = v1::Inference::NewStub(
      rpc::MakeChannel(args->String("target", "127.0.0.1:50051")));
  const bool stats = args->Bool("stats");
  std::vector<v1::ChatMessage> history;
  if (args->Has("system")) {
    v1::ChatMessage m;
    m.set_role("system");
    m.set_content(args->String("system", ""));
    history.push_back(m);
  }
  auto ask = [&](const std::string& text) -> grpc::Status {
    v1::GenerateRequest req = base;
    if (args->Bool("raw")) {
      req.set_prompt(text);
    } else {
      v1::ChatMessage user;
      user.set_role("user");
      user.set_content(text);
      history.push_back(user);
      for (const auto& m : history) *req.add_messages() = m;
    }
    std::string reply;
    grpc::Status s = Stream(stub.get(), req, stats, &reply);
    if (s.ok() && !args->Bool("raw")) {
      v1::ChatMessage a;
      a.set_role("assistant");
      a.set_content(reply);
      history.push_back(a);
    } else if (!s.ok() && !args->Bool("raw")) {
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
  if (!args->positional().empty()) {
    std::string message;
    for (const auto& p : args->positional()) {
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
