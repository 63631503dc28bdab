// End-to-end tests of the three processes (`pdserve serve` on loopback) with
// the stories260K model: streamed replies equal `pdserve generate`, the
// Python client, cancellation, 64 concurrent streams, bad input.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "proto/rpc_util.h"
#include "tests/common/cli_run.h"
#include "tests/integration/serve_harness.h"

namespace pdserve::testing {
namespace {

using ::testing::HasSubstr;

v1::GenerateRequest RawPrompt(const std::string& prompt, int max_tokens) {
  v1::GenerateRequest req;
  req.set_prompt(prompt);
  req.set_max_tokens(max_tokens);
  req.set_return_token_ids(true);
  return req;
}

class ServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (Stories260K().empty()) return;
    auto s = ServeInstance::Start({"--model", Stories260K(), "--tokenizer",
                                   Stories260KTokenizer(), "--kv-memory", "64M",
                                   "--threads", "2", "--chunk", "64",
                                   "--budget", "256"});
    ASSERT_TRUE(s.ok()) << s.status();
    serve_ = s->release();
  }
  static void TearDownTestSuite() {
    delete serve_;
    serve_ = nullptr;
  }
  void SetUp() override {
    if (Stories260K().empty())
      GTEST_SKIP() << "no ../shared/models/stories260K";
    ASSERT_NE(serve_, nullptr);
    client_ = serve_->Client();
  }

  std::vector<int32_t> GenerateIds(const std::string& prompt, int n,
                                   bool chat = false) {
    auto out = RunCommand(absl::StrCat(
        PdserveBinary(), " generate --model ", Stories260K(), " --tokenizer ",
        Stories260KTokenizer(), " --threads 1 --ids -n ", n,
        chat ? " --chat" : "", " --prompt '", prompt, "'"));
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? ParseIds(*out) : std::vector<int32_t>{};
  }

  static ServeInstance* serve_;
  std::unique_ptr<v1::Inference::Stub> client_;
};
ServeInstance* ServeTest::serve_ = nullptr;

TEST_F(ServeTest, RawPromptStreamEqualsGenerateGreedy) {
  const std::vector<int32_t> expected = GenerateIds("Once upon a time", 60);
  ASSERT_FALSE(expected.empty());
  GenerateResult r = Generate(client_.get(), RawPrompt("Once upon a time", 60));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.token_ids, expected);
  EXPECT_GT(r.deltas, 5);  // streamed, not one blob
  EXPECT_EQ(r.final.usage().completion_tokens(),
            static_cast<int>(expected.size()));
  EXPECT_THAT(r.text, HasSubstr("Lily"));
}

// Automatic prefix caching through the three processes: a prompt that
// extends one served before reuses its KV pages (the engine counts the hit
// tokens) and still streams exactly `pdserve generate`'s greedy tokens.
TEST_F(ServeTest, ExtendedPromptIsServedFromTheCacheWithTheSameTokens) {
  const std::string first =
      "Once upon a time, there was a little girl named Lily. She loved to "
      "play in the park with her big red ball. One day,";
  const std::string second = first + " her friend Tom came to the park and";
  auto engine = serve_->EngineClient();
  auto info = [&] {
    grpc::ClientContext ctx;
    v1::EngineInfo i;
    EXPECT_TRUE(engine->GetInfo(&ctx, {}, &i).ok());
    return i;
  };
  GenerateResult a = Generate(client_.get(), RawPrompt(first, 8));
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  const std::vector<int32_t> expected = GenerateIds(second, 24);
  ASSERT_FALSE(expected.empty());
  const v1::EngineInfo before = info();
  GenerateResult b = Generate(client_.get(), RawPrompt(second, 24));
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  EXPECT_EQ(b.token_ids, expected);
  const v1::EngineInfo after = info();
  const int64_t prompt = b.final.usage().prompt_tokens();
  EXPECT_EQ(
      after.prefix_cache_query_tokens() - before.prefix_cache_query_tokens(),
      prompt);
  // At least the full pages of `first` (16 tokens each), never the last
  // prompt token.
  const int64_t hits =
      after.prefix_cache_hit_tokens() - before.prefix_cache_hit_tokens();
  EXPECT_GE(hits, a.final.usage().prompt_tokens() / 16 * 16);
  EXPECT_LT(hits, prompt);
  EXPECT_EQ(hits % 16, 0);
}

TEST_F(ServeTest, ChatStreamEqualsGenerateChatGreedy) {
  const std::vector<int32_t> expected =
      GenerateIds("Tell me a story", 40, true);
  ASSERT_FALSE(expected.empty());
  v1::GenerateRequest req;
  auto* m = req.add_messages();
  m->set_role("user");
  m->set_content("Tell me a story");
  req.set_max_tokens(40);
  req.set_return_token_ids(true);
  GenerateResult r = Generate(client_.get(), req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.token_ids, expected);
}

TEST_F(ServeTest, StopStringEndsTheReplyBeforeIt) {
  GenerateResult full =
      Generate(client_.get(), RawPrompt("Once upon a time", 60));
  ASSERT_TRUE(full.status.ok());
  const size_t at = full.text.find("Lily");
  ASSERT_NE(at, std::string::npos);
  v1::GenerateRequest req = RawPrompt("Once upon a time", 60);
  req.add_stop("Lily");
  GenerateResult r = Generate(client_.get(), req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, full.text.substr(0, at));
  EXPECT_EQ(r.final.finish_reason(), v1::FINISH_REASON_STOP);
}

TEST_F(ServeTest, ReportsModelAndTokenizes) {
  grpc::ClientContext ctx;
  v1::ListModelsResponse models;
  ASSERT_TRUE(client_->ListModels(&ctx, {}, &models).ok());
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).max_seq_len(), 512);
  EXPECT_EQ(models.models(0).vocab_size(), 512);
  grpc::ClientContext ctx2;
  v1::TokenizeRequest treq;
  treq.set_text("Once upon a time");
  v1::TokenizeResponse tresp;
  ASSERT_TRUE(client_->Tokenize(&ctx2, treq, &tresp).ok());
  grpc::ClientContext ctx3;
  v1::DetokenizeRequest dreq;
  *dreq.mutable_token_ids() = tresp.token_ids();
  v1::DetokenizeResponse dresp;
  ASSERT_TRUE(client_->Detokenize(&ctx3, dreq, &dresp).ok());
  EXPECT_EQ(dresp.text(), "Once upon a time");
}

TEST_F(ServeTest, HealthServing) {
  auto health =
      grpc::health::v1::Health::NewStub(rpc::MakeChannel(serve_->target()));
  for (const char* service : {"", "pdserve.v1.Inference"}) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(health->Check(&ctx, req, &resp).ok()) << service;
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
}

// Bad requests get INVALID_ARGUMENT / RESOURCE_EXHAUSTED naming the numbers,
// and the service keeps serving.
TEST_F(ServeTest, BadInputIsRejectedWithTheNumbers) {
  struct Case {
    const char* what;
    v1::GenerateRequest req;
    grpc::StatusCode code;
    const char* message;
  };
  std::vector<Case> cases;
  auto add = [&](const char* what, grpc::StatusCode code, const char* msg,
                 auto edit) {
    v1::GenerateRequest req = RawPrompt("Once upon a time", 8);
    edit(req);
    cases.push_back({what, req, code, msg});
  };
  const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  add("no input", kInvalid, "messages is empty and no prompt",
      [](auto& r) { r.clear_prompt(); });
  add("empty messages", kInvalid, "all 2 messages have empty content",
      [](auto& r) {
        r.clear_prompt();
        r.add_messages()->set_role("system");
        r.add_messages()->set_role("user");
      });
  add("unknown role", kInvalid, "messages[0].role 'wizard'", [](auto& r) {
    r.clear_prompt();
    auto* m = r.add_messages();
    m->set_role("wizard");
    m->set_content("hi");
  });
  add("negative max_tokens", kInvalid, "max_tokens -5 must be in [1, 512]",
      [](auto& r) { r.set_max_tokens(-5); });
  add("absurd max_tokens", kInvalid,
      "max_tokens 1000000000 must be in [1, 512]",
      [](auto& r) { r.set_max_tokens(1000000000); });
  add("negative temperature", kInvalid, "temperature -0.5",
      [](auto& r) { r.mutable_sampling()->set_temperature(-0.5f); });
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += "Once upon a time ";
  add("prompt over capacity", grpc::StatusCode::RESOURCE_EXHAUSTED,
      "exceeds the sequence capacity of 512 tokens",
      [&](auto& r) { r.set_prompt(long_prompt); });
  for (const Case& c : cases) {
    GenerateResult r = Generate(client_.get(), c.req);
    EXPECT_EQ(r.status.error_code(), c.code)
        << c.what << ": " << r.status.error_message();
    EXPECT_THAT(r.status.error_message(), HasSubstr(c.message)) << c.what;
  }
  // Invalid UTF-8 (the C++ client sends it, logging a protobuf error): the
  // front end names the field and the byte offset.
  v1::GenerateRequest bad = RawPrompt("Once upon a \xff\xfe time", 8);
  GenerateResult r = Generate(client_.get(), bad);
  EXPECT_EQ(r.status.error_code(), kInvalid) << r.status.error_message();
  EXPECT_THAT(r.status.error_message(),
              HasSubstr("prompt: invalid UTF-8 at byte offset 12"));
  v1::GenerateRequest bad_chat = RawPrompt("", 8);
  bad_chat.add_messages()->set_role("system");
  bad_chat.mutable_messages(0)->set_content("fine");
  bad_chat.add_messages()->set_role("user");
  bad_chat.mutable_messages(1)->set_content("caf\xc3");
  r = Generate(client_.get(), bad_chat);
  EXPECT_EQ(r.status.error_code(), kInvalid) << r.status.error_message();
  EXPECT_THAT(r.status.error_message(),
              HasSubstr("messages[1].content: invalid UTF-8 at byte offset 3"));
  // Still serving.
  GenerateResult ok = Generate(client_.get(), RawPrompt("Once upon a time", 8));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.token_ids.size(), 8u);
}

// A client that cancels mid-stream frees its KV pages within a step of the
// cancellation reaching the engine. stories260K steps take well under a
// millisecond, less than a cancellation needs to travel client -> front end
// -> scheduler -> engine, so the test freezes the engine (SIGSTOP) while the
// cancellation propagates, then lets it go: the step in progress completes
// and the engine frees the pages before the queued step, unless the thawed
// executor reaches the queued step before its reader thread has taken the
// cancellation off the socket (then one step later). That the cancellation
// overtakes the queue when it arrives during a step is checked
// deterministically in engine_stream_test.
TEST_F(ServeTest, CancellationFreesCapacityWithinOneStep) {
  auto engine = serve_->EngineClient();
  auto scheduler = serve_->SchedulerClient();
  auto info = [&] {
    grpc::ClientContext ctx;
    v1::EngineInfo i;
    EXPECT_TRUE(engine->GetInfo(&ctx, {}, &i).ok());
    return i;
  };
  const v1::EngineInfo idle = info();
  ASSERT_EQ(idle.active_sequences(), 0);
  grpc::ClientContext ctx;
  auto reader = client_->Generate(&ctx, RawPrompt("The little dog", 500));
  v1::GenerateResponse resp;
  int deltas = 0;
  while (deltas < 5 && reader->Read(&resp)) deltas += resp.has_delta();
  ASSERT_EQ(deltas, 5);
  const v1::EngineInfo before = info();
  EXPECT_EQ(before.active_sequences(), 1);
  EXPECT_LT(before.free_pages(), idle.free_pages());
  ASSERT_EQ(kill(serve_->engine_pid(), SIGSTOP), 0);
  // Results already sent land at the scheduler; the steps it has applied are
  // then at most one behind the engine's count at the freeze (the step
  // running at SIGSTOP is not counted yet; one result may be applied but not
  // yet published in the status).
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  v1::SchedulerStatus applied;
  {
    grpc::ClientContext sctx;
    ASSERT_TRUE(scheduler->GetStatus(&sctx, {}, &applied).ok());
  }
  ctx.TryCancel();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(kill(serve_->engine_pid(), SIGCONT), 0);
  const v1::EngineInfo after = WaitEngineIdle(engine.get(), 1000, 2);
  EXPECT_EQ(after.active_sequences(), 0);
  EXPECT_EQ(after.free_pages(), idle.free_pages());
  // After the cancel: the step running at SIGSTOP and (if the thawed engine
  // reaches it before reading the cancellation) the one queued behind it.
  // Plus at most two steps the scheduler had not applied or published when
  // it was asked.
  EXPECT_LE(after.steps() - applied.steps(), 4);
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // Nothing is left running.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(info().steps(), after.steps());
}

// Request ids at the scheduler: a second live submission under an id in
// use (what two front ends generating the same id would send) is refused
// with ALREADY_EXISTS and the first stream goes on; once the first is
// closed, the id is free again.
TEST_F(ServeTest, DuplicateLiveRequestIdIsRefusedNotMerged) {
  auto scheduler = serve_->SchedulerClient();
  v1::SubmitRequest submit;
  submit.set_request_id("fe-0123456789abcdef-1");
  for (int t : {1, 400, 300, 200}) submit.add_prompt_ids(t);
  submit.set_max_new_tokens(200);
  grpc::ClientContext first_ctx;
  auto first = scheduler->Submit(&first_ctx, submit);
  v1::TokenEvent event;
  ASSERT_TRUE(first->Read(&event));  // live: it has produced a token
  {
    grpc::ClientContext ctx;
    auto second = scheduler->Submit(&ctx, submit);
    while (second->Read(&event)) {
    }
    const grpc::Status s = second->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
    EXPECT_THAT(s.error_message(), HasSubstr("fe-0123456789abcdef-1"));
  }
  int tokens = 1;
  while (first->Read(&event)) tokens += event.token_ids_size();
  EXPECT_TRUE(first->Finish().ok());
  EXPECT_EQ(tokens, 200);
  // Closed: the id may be used again.
  submit.set_max_new_tokens(3);
  grpc::ClientContext again_ctx;
  auto again = scheduler->Submit(&again_ctx, submit);
  while (again->Read(&event)) {
  }
  EXPECT_TRUE(again->Finish().ok());
}

// Two clients choosing the same request_id at one front end are both served
// (the scheduler sees the front end's own unique ids) and each gets its id
// echoed.
TEST_F(ServeTest, ClientRequestIdsMayRepeat) {
  v1::GenerateRequest req = RawPrompt("Once upon a time", 40);
  req.set_request_id("req-1");
  GenerateResult a, b;
  std::thread other([&] {
    auto client = serve_->Client();
    b = Generate(client.get(), req);
  });
  a = Generate(client_.get(), req);
  other.join();
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  EXPECT_EQ(a.final.request_id(), "req-1");
  EXPECT_EQ(b.final.request_id(), "req-1");
  EXPECT_EQ(a.token_ids, b.token_ids);  // greedy
}

// Sampled requests through the three processes: the same seed gives the
// same tokens (the draw is a function of seed and position), another seed
// others.
TEST_F(ServeTest, SeededSampledRequestsRepeatOtherSeedsDiffer) {
  v1::GenerateRequest req = RawPrompt("Once upon a time", 40);
  req.set_ignore_eos(true);
  req.mutable_sampling()->set_temperature(1.0f);
  req.mutable_sampling()->set_seed(7);
  const GenerateResult a = Generate(client_.get(), req);
  const GenerateResult b = Generate(client_.get(), req);
  req.mutable_sampling()->set_seed(8);
  const GenerateResult c = Generate(client_.get(), req);
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(a.token_ids.size(), 40u);
  EXPECT_EQ(a.token_ids, b.token_ids);
  EXPECT_NE(a.token_ids, c.token_ids);
}

// 64 concurrent streams each get exactly the tokens they get alone.
TEST_F(ServeTest, SixtyFourConcurrentStreamsMatchSoloRuns) {
  const char* starts[] = {"Once upon a time", "The little dog", "Tom had a",
                          "One day",          "The sun was",    "Lily and Ben",
                          "There was a big",  "In the park"};
  std::vector<v1::GenerateRequest> reqs;
  for (int i = 0; i < 64; ++i) {
    reqs.push_back(RawPrompt(absl::StrCat(starts[i % 8], i % 3 ? " and" : "",
                                          i / 8 % 2 ? " the" : ""),
                             24 + i % 17));
  }
  std::vector<std::vector<int32_t>> solo(64);
  for (int i = 0; i < 64; ++i) {
    GenerateResult r = Generate(client_.get(), reqs[i]);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    solo[i] = r.token_ids;
  }
  std::vector<GenerateResult> together(64);
  std::vector<std::thread> threads;
  for (int i = 0; i < 64; ++i) {
    threads.emplace_back([&, i] {
      auto stub = serve_->Client();  // own channel: real concurrency
      together[i] = Generate(stub.get(), reqs[i]);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 64; ++i) {
    ASSERT_TRUE(together[i].status.ok())
        << i << ": " << together[i].status.error_message();
    EXPECT_EQ(together[i].token_ids, solo[i]) << "stream " << i;
  }
}

v1::GenerateRequest ChatRequest(const std::vector<std::string>& turns,
                                int max_tokens) {
  v1::GenerateRequest req;
  for (size_t i = 0; i < turns.size(); ++i) {
    v1::ChatMessage* m = req.add_messages();
    m->set_role(i % 2 == 0 ? "user" : "assistant");
    m->set_content(turns[i]);
  }
  req.set_max_tokens(max_tokens);
  return req;
}

// `pdserve chat`: one-shot prints the greedy reply the API streams; the
// interactive mode (lines on stdin) sends the history with every turn; bad
// numbers are refused locally (exit 2) or by the server with its figures
// (exit 1).
TEST_F(ServeTest, ChatCliStreamsRepliesAndKeepsTheHistory) {
  const std::string chat =
      "chat --target " + serve_->target() + " --max-tokens ";
  const GenerateResult once =
      Generate(client_.get(), ChatRequest({"Once upon a time"}, 12));
  ASSERT_TRUE(once.status.ok()) << once.status.error_message();
  ASSERT_FALSE(once.text.empty());
  CliResult one = RunCli("", PdserveBinary(), chat + "12 Once upon a time");
  EXPECT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(one.out, once.text + "\n");

  auto two = RunCommand("printf 'Once upon a time\\nThe dog\\n/exit\\n' | " +
                        PdserveBinary() + " " + chat + "8");
  ASSERT_TRUE(two.ok()) << two.status();
  const GenerateResult first =
      Generate(client_.get(), ChatRequest({"Once upon a time"}, 8));
  const GenerateResult second =
      Generate(client_.get(),
               ChatRequest({"Once upon a time", first.text, "The dog"}, 8));
  ASSERT_TRUE(first.status.ok() && second.status.ok());
  EXPECT_EQ(*two, first.text + "\n" + second.text + "\n");

  CliResult negative = RunCli("", PdserveBinary(), chat + "-1 hi");
  EXPECT_EQ(negative.code, 2);
  EXPECT_THAT(negative.err, HasSubstr("--max-tokens -1 is outside 0..2147483647"));
  CliResult too_many = RunCli("", PdserveBinary(), chat + "100000 hi");
  EXPECT_EQ(too_many.code, 1);
  EXPECT_THAT(too_many.err,
              HasSubstr("INVALID_ARGUMENT: max_tokens 100000 must "
                        "be in [1, 512]"));
  // Nothing listens on port 1: the client gives up after its connect
  // timeout with the address and the timeout in its message.
  CliResult unreachable = RunCli(
      "", PdserveBinary(),
      "chat --target 127.0.0.1:1 --connect-timeout 0.3 hi");
  EXPECT_EQ(unreachable.code, 1);
  EXPECT_THAT(unreachable.err,
              HasSubstr("could not connect to 127.0.0.1:1 within 0.3 s"));
  CliResult zero = RunCli("", PdserveBinary(), chat + "4 --connect-timeout 0 hi");
  EXPECT_EQ(zero.code, 2);
  EXPECT_THAT(zero.err, HasSubstr("--connect-timeout 0 must be a number > 0"));
}

TEST_F(ServeTest, PythonClientStreamsAReply) {
  if (system("/usr/bin/python3 -c 'import grpc, grpc_tools' 2>/dev/null") !=
      0) {
    GTEST_SKIP() << "python3-grpcio / python3-grpc-tools not installed";
  }
  GenerateResult expected =
      Generate(client_.get(), RawPrompt("Once upon a time", 30));
  ASSERT_TRUE(expected.status.ok());
  auto out = RunCommand(
      absl::StrCat("/usr/bin/python3 ", PDSERVE_SOURCE_DIR,
                   "/tests/integration/python_client.py ", PDSERVE_SOURCE_DIR,
                   "/proto ", serve_->target(), " 30 'Once upon a time'"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, HasSubstr("deltas="));
  EXPECT_THAT(*out,
              HasSubstr("finish=FINISH_REASON_LENGTH completion_tokens=30"));
  EXPECT_THAT(*out, HasSubstr("health=SERVING"));
  EXPECT_THAT(*out, HasSubstr("text=" + expected.text + "\n"));
}

}  // namespace
}  // namespace pdserve::testing
