// The configuration door (config/flag_table.h, config/process_options.h):
// one table per process is the source of every default; config/pdserve.json,
// the generated help and the library structs carrying the same knobs are
// held to it; layers resolve flag > env > file > default.
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "config/process_options.h"
#include "engine/core/engine_core.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scheduler/policy.h"
#include "scheduler/scheduler_shell.h"

namespace pdserve::config {
namespace {

using ::testing::HasSubstr;

// argv for ParseCommand; element 0 is the program.
struct Args {
  explicit Args(std::vector<std::string> words) : words_(std::move(words)) {
    words_.insert(words_.begin(), "pdserve");
    for (auto& w : words_) argv_.push_back(w.data());
  }
  int argc() { return static_cast<int>(argv_.size()); }
  char** argv() { return argv_.data(); }

 private:
  std::vector<std::string> words_;
  std::vector<char*> argv_;
};

// Layers with a fake environment and no default file.
struct FakeLayers {
  std::map<std::string, std::string> env;
  std::vector<std::string> default_paths;
  Layers Get() const {
    Layers l;
    l.getenv = [this](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    };
    l.default_config_paths = default_paths;
    return l;
  }
};

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

template <typename O>
absl::StatusOr<Command<O>> Parse(const FlagTable<O>& table,
                                 std::vector<std::string> words,
                                 const FakeLayers& layers = FakeLayers()) {
  Args args(std::move(words));
  return ParseCommand(table, args.argc(), args.argv(), layers.Get());
}

// Equal as values of the flag's type ("0.5" == 0.5, "16" == 16).
void ExpectSameValue(const FlagInfo& info, const std::string& a,
                     const std::string& b, const std::string& where) {
  auto va = ParseValue(info, a), vb = ParseValue(info, b);
  ASSERT_TRUE(va.ok() && vb.ok()) << where << " " << info.name;
  switch (info.type) {
    case FlagType::kString:
      EXPECT_EQ(va->text, vb->text) << where << " " << info.name;
      break;
    case FlagType::kInt:
      EXPECT_EQ(va->i, vb->i) << where << " " << info.name;
      break;
    case FlagType::kDouble:
      EXPECT_DOUBLE_EQ(va->d, vb->d) << where << " " << info.name;
      break;
    case FlagType::kBool:
      EXPECT_EQ(va->b, vb->b) << where << " " << info.name;
      break;
  }
}

// The section of config/pdserve.json for `section` lists exactly the rows
// with a default (serve: its own rows), each with the table's value.
void ExpectFileMatchesTable(const nlohmann::json& doc,
                            const std::vector<FlagInfo>& infos,
                            const std::string& section, bool serve_own_only) {
  ASSERT_TRUE(doc.contains(section)) << section;
  const nlohmann::json& obj = doc[section];
  std::map<std::string, const FlagInfo*> expected;
  for (const FlagInfo& f : infos) {
    if (f.default_value.empty()) continue;
    if (serve_own_only && !IsServeOwnFlag(f.name)) continue;
    expected[f.name] = &f;
  }
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    auto e = expected.find(it.key());
    ASSERT_NE(e, expected.end())
        << "config/pdserve.json \"" << section << "\" has \"" << it.key()
        << "\", which the table has no default for";
    const nlohmann::json& v = it.value();
    const std::string text = v.is_string()    ? v.get<std::string>()
                             : v.is_boolean() ? (v.get<bool>() ? "true" : "false")
                                              : v.dump();
    ExpectSameValue(*e->second, text, e->second->default_value,
                    "config/pdserve.json " + section);
    expected.erase(e);
  }
  for (const auto& [name, info] : expected) {
    ADD_FAILURE() << "config/pdserve.json \"" << section << "\" lacks \""
                  << name << "\" (table default " << info->default_value << ")";
  }
}

TEST(ConfigFileTest, PdserveJsonListsEveryTableDefault) {
  std::ifstream in(std::string(PDSERVE_SOURCE_DIR) + "/config/pdserve.json");
  ASSERT_TRUE(in) << "config/pdserve.json";
  const nlohmann::json doc = nlohmann::json::parse(in);
  ExpectFileMatchesTable(doc, EngineFlagTable().Infos(), "engine", false);
  ExpectFileMatchesTable(doc, SchedulerFlagTable().Infos(), "scheduler", false);
  ExpectFileMatchesTable(doc, FrontendFlagTable().Infos(), "frontend", false);
  ExpectFileMatchesTable(doc, ServeFlagTable().Infos(), "serve", true);
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    EXPECT_THAT((std::vector<std::string>{"engine", "scheduler", "frontend",
                                          "serve"}),
                ::testing::Contains(it.key()));
  }
}

TEST(ConfigHelpTest, HelpIsGeneratedFromTheTable) {
  for (const auto& [infos, section] :
       std::vector<std::pair<std::vector<FlagInfo>, std::string>>{
           {EngineFlagTable().Infos(), "engine"},
           {SchedulerFlagTable().Infos(), "scheduler"},
           {FrontendFlagTable().Infos(), "frontend"},
           {ServeFlagTable().Infos(), "serve"}}) {
    const std::string help = Usage(infos, section);
    for (const FlagInfo& f : infos) {
      EXPECT_THAT(help, HasSubstr("--" + f.name)) << section;
      EXPECT_THAT(help, HasSubstr(f.help)) << section;
      if (!f.default_value.empty() && f.type != FlagType::kBool) {
        EXPECT_THAT(help, HasSubstr(f.help + " (default " + f.default_value +
                                    ")"))
            << section;
      }
    }
    EXPECT_THAT(help, HasSubstr(EnvName(section, "<flag>")));
  }
}

// The library structs that carry the same knobs start from the table's
// defaults, so a library user and a process user see one default.
TEST(ConfigDefaultsTest, LibraryStructsHoldTheTableDefaults) {
  const EngineProcessOptions e = EngineFlagTable().Defaults();
  const EngineOptions core;
  EXPECT_EQ(core.page_size, e.page_size);
  EXPECT_EQ(core.max_sequences, e.max_sequences);
  EXPECT_EQ(core.max_step_tokens, e.max_step_tokens);
  // --kv-dtype: unset in both, meaning bf16 (CPU and device).
  EXPECT_TRUE(e.kv_dtype.empty());
  EXPECT_FALSE(core.kv_dtype.has_value());
  EXPECT_EQ(e.port, 50053);  // the port the scheduler's default dials
  const SchedulerProcessOptions s = SchedulerFlagTable().Defaults();
  EXPECT_EQ(s.engine, "127.0.0.1:" + std::to_string(e.port));
  const scheduler::PolicyConfig policy;
  EXPECT_EQ(policy.step_token_budget, s.budget);
  EXPECT_EQ(policy.prefill_chunk, s.chunk);
  EXPECT_EQ(policy.max_running, s.max_running);
  EXPECT_EQ(policy.max_waiting, s.max_queue);
  const scheduler::ShellOptions shell;
  EXPECT_EQ(shell.pipeline_depth, s.pipeline_depth);
  EXPECT_EQ(shell.step_deadline.count(),
            static_cast<int64_t>(s.step_timeout_s * 1000));
  const FrontendProcessOptions f = FrontendFlagTable().Defaults();
  EXPECT_EQ(f.scheduler, "127.0.0.1:" + std::to_string(s.port));
}

TEST(ConfigLayersTest, FlagBeatsEnvBeatsFileBeatsDefault) {
  const std::string file = WriteTemp(
      "layers.json",
      R"({"common": {"host": "10.0.0.1"},
          "engine": {"page-size": 32, "max-sequences": 8, "threads": 3}})");
  FakeLayers layers;
  layers.env = {{"PDSERVE_ENGINE_MAX_SEQUENCES", "9"},
                {"PDSERVE_ENGINE_THREADS", "4"}};
  auto c = Parse(EngineFlagTable(), {"--config", file, "--threads=5"}, layers);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.max_step_tokens, 2048);  // default
  EXPECT_EQ(c->options.host, "10.0.0.1");       // file, common section
  EXPECT_EQ(c->options.page_size, 32);          // file
  EXPECT_EQ(c->options.max_sequences, 9);       // env over file
  EXPECT_EQ(c->options.threads, 5);             // flag over env over file
  EXPECT_EQ(c->resolution.values.at("page-size").source, Source::kFile);
  EXPECT_EQ(c->resolution.values.at("max-sequences").source, Source::kEnv);
  EXPECT_EQ(c->resolution.values.at("threads").source, Source::kFlag);
  EXPECT_EQ(c->resolution.values.at("max-step-tokens").source,
            Source::kDefault);
  EXPECT_EQ(c->resolution.config_path, file);
}

TEST(ConfigLayersTest, ConfigFileSearchOrder) {
  const std::string a = WriteTemp("a.json", R"({"engine": {"page-size": 8}})");
  const std::string b = WriteTemp("b.json", R"({"engine": {"page-size": 64}})");
  const std::string etc = WriteTemp("etc.json", R"({"engine": {"page-size": 4}})");
  FakeLayers layers;
  layers.default_paths = {::testing::TempDir() + "/missing.json", etc};
  auto c = Parse(EngineFlagTable(), {}, layers);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.page_size, 4);  // the first default path that exists
  layers.env["PDSERVE_CONFIG"] = b;
  c = Parse(EngineFlagTable(), {}, layers);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.page_size, 64);  // $PDSERVE_CONFIG over the default
  c = Parse(EngineFlagTable(), {"--config=" + a}, layers);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.page_size, 8);  // --config over $PDSERVE_CONFIG
  layers.env.clear();
  layers.default_paths = {::testing::TempDir() + "/missing.json"};
  c = Parse(EngineFlagTable(), {}, layers);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.page_size, 16);  // no file anywhere: the default
  EXPECT_EQ(c->resolution.config_path, "");
}

TEST(ConfigLayersTest, BadInputNamesTheFlagAndTheLayer) {
  FakeLayers layers;
  layers.env["PDSERVE_ENGINE_PAGE_SIZE"] = "big";
  auto c = Parse(EngineFlagTable(), {}, layers);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              HasSubstr("--page-size: 'big' is not an integer (from env "
                        "PDSERVE_ENGINE_PAGE_SIZE)"));
  layers.env["PDSERVE_ENGINE_PAGE_SIZE"] = "0";
  c = Parse(EngineFlagTable(), {}, layers);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("--page-size 0 must be >= 1 (from env "
                        "PDSERVE_ENGINE_PAGE_SIZE)"));
  EXPECT_THAT(Parse(EngineFlagTable(), {"--port", "99999"}).status().message(),
              HasSubstr("--port 99999 is outside 0..65535"));
  EXPECT_THAT(Parse(EngineFlagTable(), {"--nope"}).status().message(),
              HasSubstr("unknown flag --nope"));
  EXPECT_THAT(Parse(EngineFlagTable(), {"--port"}).status().message(),
              HasSubstr("flag --port needs a value"));
  const std::string bad_key =
      WriteTemp("bad_key.json", R"({"engine": {"bogus": 1}})");
  EXPECT_THAT(
      Parse(EngineFlagTable(), {"--config", bad_key}).status().message(),
      HasSubstr("unknown key \"bogus\" in \"engine\""));
  // A key of another process in "common" is fine.
  const std::string common =
      WriteTemp("common.json", R"({"common": {"budget": 7}})");
  EXPECT_TRUE(Parse(EngineFlagTable(), {"--config", common}).ok());
  const std::string bad_type =
      WriteTemp("bad_type.json", R"({"engine": {"page-size": "x"}})");
  EXPECT_THAT(
      Parse(EngineFlagTable(), {"--config", bad_type}).status().message(),
      HasSubstr("'x' is not an integer (from config " + bad_type + ")"));
  const std::string broken = WriteTemp("broken.json", "{");
  EXPECT_EQ(Parse(EngineFlagTable(), {"--config", broken}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Parse(EngineFlagTable(), {"--config", "/nonexistent/x.json"})
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST(ConfigBoolTest, BooleanFlagsTakeTheFormsUsersWrite) {
  auto c = Parse(EngineFlagTable(), {});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->options.prefix_cache);
  c = Parse(EngineFlagTable(), {"--no-prefix-cache"});
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->options.prefix_cache);
  FakeLayers layers;
  layers.env["PDSERVE_ENGINE_NO_PREFIX_CACHE"] = "true";
  c = Parse(EngineFlagTable(), {"--no-prefix-cache=false"}, layers);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->options.prefix_cache);  // the flag beats the env
  EXPECT_FALSE(Parse(EngineFlagTable(), {"--no-prefix-cache=maybe"}).ok());
}

TEST(ServeTableTest, ComposesTheThreeTables) {
  const auto serve = ServeFlagTable().Infos();
  auto has = [&](const std::string& name) {
    for (const auto& f : serve) {
      if (f.name == name) return true;
    }
    return false;
  };
  // Every child flag is serve's too, except the addresses serve sets itself.
  for (const std::vector<FlagInfo>& infos :
       {EngineFlagTable().Infos(), SchedulerFlagTable().Infos(),
        FrontendFlagTable().Infos()}) {
    for (const FlagInfo& f : infos) {
      EXPECT_TRUE(has(f.name) || IsServeOwnFlag(f.name)) << f.name;
    }
  }
  EXPECT_FALSE(has("metrics-host"));  // serve's children: --host's interface
  auto c = Parse(ServeFlagTable(),
                 {"--model", "m.gguf", "--name", "smol", "--page-size", "32",
                  "--budget", "100", "--http-port", "0", "--vllm-metrics"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.model, "m.gguf");
  EXPECT_EQ(c->options.engine.name, "smol");  // a flag of several children
  EXPECT_EQ(c->options.scheduler.name, "smol");
  EXPECT_EQ(c->options.frontend.name, "smol");
  EXPECT_TRUE(c->options.engine.metrics.vllm_compat);
  EXPECT_TRUE(c->options.frontend.metrics.vllm_compat);
  EXPECT_EQ(c->options.engine.page_size, 32);
  EXPECT_EQ(c->options.scheduler.budget, 100);
  EXPECT_EQ(c->options.frontend.http_port, 0);
  EXPECT_EQ(c->options.scheduler.chunk, 256);  // child default
  EXPECT_THAT(Parse(ServeFlagTable(), {"--budget", "0"}).status().message(),
              HasSubstr("--budget 0 must be >= 1"));
}

}  // namespace
}  // namespace pdserve::config
