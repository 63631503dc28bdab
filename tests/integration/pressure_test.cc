// The pressure paths end to end through the three real processes:
//  - a KV pool too small for the streams at once: requests are preempted
//    (recompute) and every stream still gets exactly its solo tokens;
//  - a drain whose deadline expires while streams are stuck (a frozen
//    engine): each open stream ends with a clear non-OK status, and serve
//    exits instead of hanging;
//  - a request the engine refuses (a token id outside the vocabulary, sent
//    straight to the scheduler) fails alone with the numbers, while the
//    other streams of the same steps complete unchanged and the engine is
//    not taken as lost.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/serve_harness.h"

namespace pdserve::testing {
namespace {

v1::GenerateRequest Story(int i, int tokens) {
  v1::GenerateRequest req;
  req.set_prompt(absl::StrCat(i % 2 ? "Once upon a time" : "The little dog",
                              i % 3 ? " and" : "", i % 4 ? " the" : ""));
  req.set_max_tokens(tokens);
  req.set_ignore_eos(true);
  req.set_return_token_ids(true);
  return req;
}

v1::SchedulerStatus SchedulerStatusOf(const ServeInstance& serve) {
  auto scheduler = serve.SchedulerClient();
  grpc::ClientContext ctx;
  v1::SchedulerStatus status;
  EXPECT_TRUE(scheduler->GetStatus(&ctx, {}, &status).ok());
  return status;
}

// Runs `reqs` concurrently, one channel each.
std::vector<GenerateResult> RunTogether(
    const ServeInstance& serve, const std::vector<v1::GenerateRequest>& reqs) {
  std::vector<GenerateResult> out(reqs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i) {
    threads.emplace_back([&, i] {
      auto stub = serve.Client();
      out[i] = Generate(stub.get(), reqs[i]);
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

std::unique_ptr<ServeInstance> StartStories(std::vector<std::string> extra) {
  auto s = StartStories260K(extra);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// 640 KB of bf16 KV is 1,024 tokens of stories260K (640 bytes a token): 12
// streams of ~210 tokens need 2.5x that, so the scheduler preempts.
TEST(PressureTest, PoolExhaustionPreemptsAndStreamsEqualTheirSoloRuns) {
  if (Stories260K().empty()) GTEST_SKIP() << "no ../shared/models/stories260K";
  auto serve = StartStories({"--kv-memory", "640K"});
  ASSERT_NE(serve, nullptr);
  std::vector<v1::GenerateRequest> reqs;
  std::vector<std::vector<int32_t>> solo;
  auto client = serve->Client();
  for (int i = 0; i < 12; ++i) {
    reqs.push_back(Story(i, 200));
    GenerateResult r = Generate(client.get(), reqs.back());
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    solo.push_back(r.token_ids);
  }
  const int64_t preempted_before = SchedulerStatusOf(*serve).preemptions();
  const std::vector<GenerateResult> together = RunTogether(*serve, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(together[i].status.ok())
        << i << ": " << together[i].status.error_message();
    EXPECT_EQ(together[i].final.finish_reason(), v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(together[i].token_ids, solo[i]) << "stream " << i;
  }
  const int64_t preempted = SchedulerStatusOf(*serve).preemptions() - preempted_before;
  EXPECT_GT(preempted, 0) << "the pool never ran out: the test proves nothing";
  std::printf("%lld preemptions\n", static_cast<long long>(preempted));
}

// SIGTERM with --drain-seconds 1 while the engine is frozen: the streams
// cannot finish; when the drain time is up each ends with a non-OK status
// and a message, and serve exits.
TEST(PressureTest, DrainDeadlineExpiresWithAClearStatus) {
  if (Stories260K().empty()) GTEST_SKIP() << "no ../shared/models/stories260K";
  auto serve = StartStories({"--kv-memory", "64M", "--drain-seconds", "1"});
  ASSERT_NE(serve, nullptr);
  const pid_t engine = CurrentEnginePid(*serve);
  ASSERT_GT(engine, 0);
  std::vector<std::unique_ptr<v1::Inference::Stub>> stubs;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>>> readers;
  for (int i = 0; i < 4; ++i) {
    stubs.push_back(serve->Client());
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() +
                                  std::chrono::seconds(120));
    readers.push_back(stubs.back()->Generate(contexts.back().get(), Story(i, 400)));
    v1::GenerateResponse first;
    ASSERT_TRUE(readers.back()->Read(&first));
  }
  ASSERT_EQ(kill(engine, SIGSTOP), 0);
  const auto signalled = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(serve->pid(), SIGTERM), 0);
  for (auto& reader : readers) {
    v1::GenerateResponse resp;
    while (reader->Read(&resp)) {
    }
    const grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(s.error_message(),
                ::testing::HasSubstr("did not finish within the drain time "
                                     "(--drain-seconds 1)"));
    std::printf("stream ended %d: %s\n", s.error_code(), s.error_message().c_str());
  }
  const double waited_s = std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - signalled)
                              .count();
  EXPECT_LT(waited_s, 60) << "the 120 s client deadline, not the drain, ended them";
  kill(engine, SIGCONT);
  const int status = serve->WaitExit(60);
  EXPECT_NE(status, -1) << "serve did not exit after its drain";
}

// A request with a token id outside the 512-token vocabulary, sent straight
// to the scheduler (the front end would refuse it), reaches the engine in the
// same steps as 8 good streams: only it fails, INVALID_ARGUMENT naming the
// id; the others equal their solo runs and no engine loss is counted.
TEST(PressureTest, ARequestTheEngineRefusesFailsAlone) {
  if (Stories260K().empty()) GTEST_SKIP() << "no ../shared/models/stories260K";
  auto serve = StartStories({"--kv-memory", "64M"});
  ASSERT_NE(serve, nullptr);
  std::vector<v1::GenerateRequest> reqs;
  std::vector<std::vector<int32_t>> solo;
  auto client = serve->Client();
  for (int i = 0; i < 8; ++i) {
    reqs.push_back(Story(i, 120));
    GenerateResult r = Generate(client.get(), reqs.back());
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    solo.push_back(r.token_ids);
  }
  grpc::Status bad_status;
  std::thread bad([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto scheduler = serve->SchedulerClient();
    grpc::ClientContext ctx;
    v1::SubmitRequest req;
    req.set_request_id("pressure-bad-token");
    for (int id : {1, 40, 99999, 41}) req.add_prompt_ids(id);
    req.set_max_new_tokens(8);
    auto reader = scheduler->Submit(&ctx, req);
    v1::TokenEvent event;
    while (reader->Read(&event)) {
    }
    bad_status = reader->Finish();
  });
  const std::vector<GenerateResult> together = RunTogether(*serve, reqs);
  bad.join();
  EXPECT_EQ(bad_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << bad_status.error_message();
  EXPECT_THAT(bad_status.error_message(), ::testing::HasSubstr("99999"));
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(together[i].status.ok())
        << i << ": " << together[i].status.error_message();
    EXPECT_EQ(together[i].token_ids, solo[i]) << "stream " << i;
  }
  EXPECT_EQ(SchedulerStatusOf(*serve).engine_losses(), 0);
}

}  // namespace
}  // namespace pdserve::testing
