// The configuration door end to end: a key in the config file, an
// environment variable and a flag each change what the real `pdserve
// engine` (started by `pdserve serve --config FILE`) does, with flag > env >
// file.
#include <stdlib.h>

#include <fstream>
#include <string>

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

}  // namespace
}  // namespace pdserve::testing
