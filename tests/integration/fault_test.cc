// Fault and lifecycle tests of `pdserve serve`: kill -9 of the engine during
// a stream with resumption off (UNAVAILABLE, health NOT_SERVING, restart,
// service resumes), a hung engine outlasting the recovery time, and SIGTERM
// draining. Streams that survive a lost engine: resume_test.cc.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "proto/rpc_util.h"
#include "tests/common/cli_run.h"
#include "tests/integration/serve_harness.h"

namespace pdserve::testing {
namespace {

using HealthStatus = grpc::health::v1::HealthCheckResponse;

v1::GenerateRequest RawPrompt(const std::string& prompt, int max_tokens) {
  v1::GenerateRequest req;
  req.set_prompt(prompt);
  req.set_max_tokens(max_tokens);
  req.set_return_token_ids(true);
  return req;
}

std::unique_ptr<ServeInstance> StartStories(
    std::vector<std::string> extra = {}) {
  extra.insert(extra.begin(), {"--kv-memory", "64M"});
  auto s = StartStories260K(extra);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

HealthStatus::ServingStatus Health(grpc::health::v1::Health::Stub* stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  grpc::health::v1::HealthCheckRequest req;
  HealthStatus resp;
  if (!stub->Check(&ctx, req, &resp).ok()) return HealthStatus::UNKNOWN;
  return resp.status();
}

// --engine-recovery-seconds 0: a lost engine ends its streams at once.
TEST(ServeFaultTest, EngineKilledMidStreamGivesUnavailableThenRecovers) {
  if (Stories260K().empty()) GTEST_SKIP() << "no ../shared/models/stories260K";
  auto serve = StartStories({"--engine-recovery-seconds", "0"});
  ASSERT_NE(serve, nullptr);
  auto client = serve->Client();
  auto health =
      grpc::health::v1::Health::NewStub(rpc::MakeChannel(serve->target()));
  ASSERT_EQ(Health(health.get()), HealthStatus::SERVING);

  grpc::ClientContext ctx;
  auto reader = client->Generate(&ctx, RawPrompt("Once upon a time", 500));
  v1::GenerateResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  // Watch health from now on: it must report NOT_SERVING while the engine
  // is down.
  std::atomic<bool> watching{true}, saw_not_serving{false};
  std::thread watcher([&] {
    while (watching) {
      if (Health(health.get()) == HealthStatus::NOT_SERVING)
        saw_not_serving = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  ASSERT_EQ(kill(serve->engine_pid(), SIGKILL), 0);
  while (reader->Read(&resp)) {
  }
  grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();

  // The supervisor restarts the engine; a new request then succeeds.
  bool recovered = false;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!recovered && std::chrono::steady_clock::now() < deadline) {
    GenerateResult r =
        Generate(client.get(), RawPrompt("Once upon a time", 10));
    recovered = r.status.ok() && r.token_ids.size() == 10;
    if (!recovered) {
      EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE)
          << r.status.error_message();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  watching = false;
  watcher.join();
  const double recovery_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                    (deadline - std::chrono::seconds(60)))
          .count();
  EXPECT_TRUE(recovered) << serve->log();
  std::printf("recovered %.2f s after the kill\n", recovery_s);
  EXPECT_TRUE(saw_not_serving);
  // Health follows the scheduler's view within a few polls.
  HealthStatus::ServingStatus final_health = HealthStatus::UNKNOWN;
  for (int i = 0; i < 100 && final_health != HealthStatus::SERVING; ++i) {
    final_health = Health(health.get());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(final_health, HealthStatus::SERVING);
  EXPECT_THAT(serve->log(), ::testing::HasSubstr("engine (pid"));
}

// A hung engine (SIGSTOP) is given up on after --step-timeout, and its
// requests wait --engine-recovery-seconds for it: when it stays hung longer,
// the stream ends UNAVAILABLE naming the flag instead of hanging; once the
// engine runs again the scheduler reconnects, the engine has released the
// abandoned sequence (its step stream ended), and new requests succeed.
TEST(ServeFaultTest, HungEngineOutlastingTheRecoveryTimeGivesUnavailable) {
  if (Stories260K().empty()) GTEST_SKIP() << "no ../shared/models/stories260K";
  auto s = ServeInstance::Start({"--model", Stories260K(), "--tokenizer",
                                 Stories260KTokenizer(), "--kv-memory", "64M",
                                 "--threads", "1", "--step-timeout", "1",
                                 "--engine-recovery-seconds", "2"});
  ASSERT_TRUE(s.ok()) << s.status();
  auto serve = std::move(*s);
  auto client = serve->Client();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto reader = client->Generate(&ctx, RawPrompt("Once upon a time", 500));
  v1::GenerateResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  ASSERT_EQ(kill(serve->engine_pid(), SIGSTOP), 0);
  const auto stopped = std::chrono::steady_clock::now();
  while (reader->Read(&resp)) {
  }
  const grpc::Status status = reader->Finish();
  const double waited_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped)
          .count();
  ASSERT_EQ(kill(serve->engine_pid(), SIGCONT), 0);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
  EXPECT_THAT(status.error_message(),
              ::testing::HasSubstr("did not come back within 2 s "
                                   "(--engine-recovery-seconds)"));
  // 1 s step timeout + 2 s recovery, not the 30 s client deadline.
  EXPECT_GE(waited_s, 2.5);
  EXPECT_LT(waited_s, 20);
  bool recovered = false;
  for (int i = 0; i < 600 && !recovered; ++i) {
    GenerateResult r =
        Generate(client.get(), RawPrompt("Once upon a time", 10));
    recovered = r.status.ok() && r.token_ids.size() == 10;
    if (!recovered) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(recovered) << serve->log();
  // Nothing is left behind in the engine.
  auto engine = serve->EngineClient();
  const v1::EngineInfo info = WaitEngineIdle(engine.get());
  EXPECT_EQ(info.active_sequences(), 0);
  EXPECT_EQ(info.free_pages(), info.total_pages());
}

// SIGTERM: the front end stops taking requests (health NOT_SERVING, new
// Generate calls UNAVAILABLE) while the open stream still runs to its end,
// then the whole service exits 0. The late request is sent only once health
// has left SERVING, so the check does not depend on how fast the open stream
// ends relative to the signal's delivery.
TEST(ServeFaultTest, SigtermDrainsInFlightRequests) {
  if (Stories260K().empty()) GTEST_SKIP() << "no ../shared/models/stories260K";
  auto serve = StartStories();
  ASSERT_NE(serve, nullptr);
  auto client = serve->Client();
  auto health =
      grpc::health::v1::Health::NewStub(rpc::MakeChannel(serve->target()));
  grpc::ClientContext ctx;
  auto reader = client->Generate(&ctx, RawPrompt("Once upon a time", 300));
  v1::GenerateResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  ASSERT_EQ(kill(serve->pid(), SIGTERM), 0);
  bool left_serving = false;
  for (int i = 0; i < 200 && !left_serving; ++i) {
    left_serving = Health(health.get()) != HealthStatus::SERVING;
    if (!left_serving)
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_TRUE(left_serving) << "health still SERVING 5 s after SIGTERM";
  // New requests are refused while draining or after.
  GenerateResult late =
      Generate(client.get(), RawPrompt("Once upon a time", 5));
  EXPECT_FALSE(late.status.ok());
  if (!late.status.ok()) {
    EXPECT_EQ(late.status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << late.status.error_message();
  }
  // The open stream still delivers every token.
  int tokens = resp.has_delta() ? resp.delta().token_ids_size() : 0;
  v1::Final final;
  while (reader->Read(&resp)) {
    if (resp.has_delta()) tokens += resp.delta().token_ids_size();
    if (resp.has_final()) final = resp.final();
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(tokens, 300);
  EXPECT_EQ(final.finish_reason(), v1::FINISH_REASON_LENGTH);
  const int status = serve->WaitExit(60);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// A model that cannot load is an error, not a restart loop: a missing path is
// refused before any child starts; a file that is no model makes the engine
// and the front end exit, and after a child's third failed start (the
// service never became ready) serve stops everything and exits 1, the
// children's messages on stderr.
TEST(ServeFaultTest, BadModelExitsInsteadOfRestartingForever) {
  CliResult missing =
      RunCli("", PdserveBinary(), "serve --model /nonexistent/model.gguf");
  EXPECT_EQ(missing.code, 1) << missing.err;
  EXPECT_THAT(
      missing.err,
      ::testing::HasSubstr(
          "pdserve serve: --model /nonexistent/model.gguf: No such file"));
  EXPECT_THAT(missing.err, ::testing::Not(::testing::HasSubstr("restart")));

  const std::string bad = ::testing::TempDir() + "/not_a_model.gguf";
  FILE* f = std::fopen(bad.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("this is no model\n", f);
  std::fclose(f);
  CliResult garbage =
      RunCli("", PdserveBinary(), "serve --port 0 --model " + bad);
  EXPECT_EQ(garbage.code, 1) << garbage.err;
  EXPECT_THAT(garbage.err, ::testing::HasSubstr("unrecognized model format"));
  // The engine or the front end (both read the model) gives up first.
  EXPECT_THAT(garbage.err,
              ::testing::HasSubstr("failed to start (3 exits before the "
                                   "service was ready); stopping"));
  EXPECT_THAT(garbage.err, ::testing::Not(::testing::HasSubstr("restart #3")));
}

// A port outside 0..65535 is refused by every process, in the one message
// of the flag tables and as a usage error (gRPC would listen on the port
// modulo 2^16: --port 99999 served on 34463).
TEST(ServeFaultTest, PortsOutsideTheRangeAreRefused) {
  if (Stories260K().empty()) GTEST_SKIP() << "no ../shared/models/stories260K";
  const std::string model =
      " --model " + Stories260K() + " --tokenizer " + Stories260KTokenizer();
  struct Case {
    std::string args, message;
    int code;
  };
  for (const Case& c : std::vector<Case>{
           {"serve" + model + " --port 70000",
            "pdserve serve: --port 70000 is outside 0..65535", 2},
           {"engine --model " + Stories260K() + " --port 99999",
            "pdserve engine: --port 99999 is outside 0..65535", 2},
           {"scheduler --port 99999",
            "pdserve scheduler: --port 99999 is outside 0..65535", 2},
           {"frontend --model " + Stories260KTokenizer() + " --port 4294967297",
            "pdserve frontend: --port 4294967297 is outside 0..65535", 2}}) {
    CliResult r = RunCli("", PdserveBinary(), c.args);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.err;
    EXPECT_THAT(r.err, ::testing::HasSubstr(c.message)) << c.args;
  }
}

// SmolLM2-135M-Instruct (when cached): a chat reply through the three
// processes equals `pdserve generate --chat` greedy output.
TEST(ServeModelTest, SmolLm2ChatEqualsGenerate) {
  const std::string model = SmolLm2();
  if (model.empty())
    GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not cached";
  auto out = RunCommand(
      PdserveBinary() + " generate --model " + model +
      " --chat --ids -n 32 --prompt 'What is the capital of France?'");
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<int32_t> expected = ParseIds(*out);
  ASSERT_FALSE(expected.empty());
  auto serve = ServeInstance::Start({"--model", model, "--kv-memory", "256M"});
  ASSERT_TRUE(serve.ok()) << serve.status();
  v1::GenerateRequest req;
  auto* m = req.add_messages();
  m->set_role("user");
  m->set_content("What is the capital of France?");
  req.set_max_tokens(32);
  req.set_return_token_ids(true);
  auto client = (*serve)->Client();
  GenerateResult r = Generate(client.get(), req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.token_ids, expected);
  EXPECT_FALSE(r.text.empty());
}

}  // namespace
}  // namespace pdserve::testing
