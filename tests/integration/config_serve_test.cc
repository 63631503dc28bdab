// The configuration door end to end: a key in the config file, an
// environment variable and a flag each change what the real `pdserve
// engine` (started by `pdserve serve --config FILE`) does, with flag > env >
// file. And the one capacity, --max-seq-len: every process reports and
// enforces the engine's, also after the engine restarts with another.
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/serve_harness.h"

namespace pdserve::testing {
namespace {

std::string WriteConfig(const std::string& name, const std::string& json) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << json;
  return path;
}

v1::EngineInfo EngineInfoOf(const ServeInstance& serve) {
  grpc::ClientContext ctx;
  v1::EngineInfo info;
  EXPECT_TRUE(serve.EngineClient()->GetInfo(&ctx, {}, &info).ok());
  return info;
}

class ConfigServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Stories260K().empty()) {
      GTEST_SKIP() << "no ../shared/models/stories260K";
    }
  }
  void TearDown() override { unsetenv("PDSERVE_ENGINE_MAX_SEQUENCES"); }
  std::vector<std::string> Base(const std::string& config) {
    return {"--model",    Stories260K(), "--tokenizer", Stories260KTokenizer(),
            "--threads",  "1",           "--config",    config};
  }
};

TEST_F(ConfigServeTest, FileKeyChangesTheEngine) {
  const std::string config = WriteConfig(
      "engine16.json", R"({"engine": {"page-size": 16, "kv-memory": "32M"}})");
  auto a = ServeInstance::Start(Base(config));
  ASSERT_TRUE(a.ok()) << a.status();
  const v1::EngineInfo before = EngineInfoOf(**a);
  EXPECT_EQ(before.page_size(), 16);
  a->reset();
  const std::string changed = WriteConfig(
      "engine32.json", R"({"engine": {"page-size": 32, "kv-memory": "32M"}})");
  auto b = ServeInstance::Start(Base(changed));
  ASSERT_TRUE(b.ok()) << b.status();
  const v1::EngineInfo after = EngineInfoOf(**b);
  EXPECT_EQ(after.page_size(), 32);
  // The same budget in pages twice the size: about half as many.
  EXPECT_LT(after.total_pages(), before.total_pages());
}

TEST_F(ConfigServeTest, FlagBeatsEnvBeatsFile) {
  const std::string config = WriteConfig(
      "layers.json",
      R"({"engine": {"max-sequences": 5, "page-size": 8, "kv-memory": "32M"}})");
  setenv("PDSERVE_ENGINE_MAX_SEQUENCES", "6", 1);
  std::vector<std::string> args = Base(config);
  auto env = ServeInstance::Start(args);
  ASSERT_TRUE(env.ok()) << env.status();
  v1::EngineInfo info = EngineInfoOf(**env);
  EXPECT_EQ(info.max_batch(), 6);  // env over file
  EXPECT_EQ(info.page_size(), 8);  // file
  env->reset();
  args.insert(args.end(), {"--max-sequences", "7"});
  auto flag = ServeInstance::Start(args);
  ASSERT_TRUE(flag.ok()) << flag.status();
  info = EngineInfoOf(**flag);
  EXPECT_EQ(info.max_batch(), 7);  // the flag over env and file
  EXPECT_EQ(info.page_size(), 8);
}

TEST_F(ConfigServeTest, BadConfigValueStopsServeNamingIt) {
  const std::string config =
      WriteConfig("bad.json", R"({"engine": {"page-size": "many"}})");
  auto serve = ServeInstance::Start(Base(config), 30);
  ASSERT_FALSE(serve.ok());
  EXPECT_NE(std::string(serve.status().message())
                .find("--page-size: 'many' is not an integer (from config " +
                      config + ")"),
            std::string::npos)
      << serve.status();
}

v1::GenerateRequest PromptWithMaxTokens(int max_tokens) {
  v1::GenerateRequest req;
  req.set_prompt("Once upon a time");
  req.set_max_tokens(max_tokens);
  return req;
}

int32_t FrontendCapacity(const ServeInstance& serve) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::ListModelsResponse models;
  if (!serve.Client()->ListModels(&ctx, {}, &models).ok() ||
      models.models_size() != 1) {
    return -1;
  }
  return models.models(0).max_seq_len();
}

// Each process reports `capacity` and refuses one token more.
void ExpectEveryProcessEnforces(const ServeInstance& serve, int capacity) {
  SCOPED_TRACE(capacity);
  EXPECT_EQ(EngineInfoOf(serve).max_seq_len(), capacity);
  {
    grpc::ClientContext ctx;
    v1::SchedulerStatus status;
    ASSERT_TRUE(serve.SchedulerClient()->GetStatus(&ctx, {}, &status).ok());
    EXPECT_EQ(status.max_seq_len(), capacity);
  }
  EXPECT_EQ(FrontendCapacity(serve), capacity);
  // The front end: max_tokens past the capacity.
  GenerateResult over =
      Generate(serve.Client().get(), PromptWithMaxTokens(capacity + 1));
  EXPECT_EQ(over.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(over.status.error_message().find(
                "must be in [1, " + std::to_string(capacity) + "]"),
            std::string::npos)
      << over.status.error_message();
  // The scheduler: a prompt one token longer than the capacity.
  {
    grpc::ClientContext ctx;
    v1::SubmitRequest submit;
    for (int i = 0; i <= capacity; ++i) submit.add_prompt_ids(100 + i % 1000);
    submit.set_max_new_tokens(1);
    auto reader = serve.SchedulerClient()->Submit(&ctx, submit);
    v1::TokenEvent event;
    while (reader->Read(&event)) {
    }
    grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(s.error_message().find(std::to_string(capacity)),
              std::string::npos)
        << s.error_message();
  }
  // The engine: an admission asking for one position more.
  {
    grpc::ClientContext ctx;
    auto stream = serve.EngineClient()->StepStream(&ctx);
    v1::StepRequest req;
    v1::AddSequenceRequest* add = req.add_admit();
    add->set_seq_id(0x7e57c0de);
    add->add_prompt_ids(100);
    add->set_max_seq_len(capacity + 1);
    add->set_max_new_tokens(1);
    ASSERT_TRUE(stream->Write(req));
    v1::StepResponse resp;
    ASSERT_TRUE(stream->Read(&resp));
    ASSERT_EQ(resp.rejected_size(), 1);
    EXPECT_EQ(resp.rejected(0).code(),
              static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
    EXPECT_NE(resp.rejected(0).message().find(
                  "exceeds the engine's sequence capacity of " +
                  std::to_string(capacity) + " tokens"),
              std::string::npos)
        << resp.rejected(0).message();
    v1::StepRequest release;
    release.add_release_ids(0x7e57c0de);
    ASSERT_TRUE(stream->Write(release));
    ASSERT_TRUE(stream->Read(&resp));
    stream->WritesDone();
    (void)stream->Finish();
  }
}

// SmolLM2-135M (context 8192): --max-seq-len 1024 everywhere; the engine
// restarts (killed; serve starts it again, reading the changed config file)
// with 2048, and the front end enforces 2048.
TEST(MaxSeqLenTest, EveryProcessEnforcesTheEnginesCapacityAcrossRestarts) {
  const std::string model = SmolLm2();
  if (model.empty()) GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not cached";
  const std::string config = ::testing::TempDir() + "/max_seq_len.json";
  std::ofstream(config)
      << R"({"engine": {"max-seq-len": 1024, "kv-memory": "256M"}})";
  auto serve = ServeInstance::Start(
      {"--model", model, "--threads", "2", "--config", config});
  ASSERT_TRUE(serve.ok()) << serve.status();
  ExpectEveryProcessEnforces(**serve, 1024);

  std::ofstream(config)
      << R"({"engine": {"max-seq-len": 2048, "kv-memory": "256M"}})";
  ASSERT_EQ(kill((*serve)->engine_pid(), SIGKILL), 0);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (FrontendCapacity(**serve) != 2048 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(FrontendCapacity(**serve), 2048) << (*serve)->log();
  ExpectEveryProcessEnforces(**serve, 2048);
  // What 1024 refused is served now: the stream starts (then is cancelled).
  grpc::ClientContext ctx;
  auto reader = (*serve)->Client()->Generate(&ctx, PromptWithMaxTokens(1500));
  v1::GenerateResponse first;
  EXPECT_TRUE(reader->Read(&first));
  ctx.TryCancel();
  (void)reader->Finish();
}

}  // namespace
}  // namespace pdserve::testing
