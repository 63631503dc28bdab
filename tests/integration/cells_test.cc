// `pdserve serve --cells 2`: two cells (a scheduler and its engine each)
// behind one front end that routes by prompt prefix, then load.
//  - 64 streams of distinct prompts spread over both cells, each equal to
//    its solo run; killing one cell's engine under that load loses no
//    stream (the front end moves that cell's streams to the other, which
//    resumes them by recompute);
//  - a second front end that finds the cells by DNS (dns:///localhost:P)
//    routes over both and streams the same tokens;
//  - 32 requests that share a 1,536-token prompt prefix (SmolLM2, when
//    cached) all land on one cell and get >= 90% of their prompt tokens
//    from its prefix cache.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/serve_harness.h"

namespace pdserve::testing {
namespace {

v1::SchedulerStatus Status(const std::string& scheduler) {
  return SchedulerStatusOf(scheduler);
}

int64_t Steps(const std::string& scheduler) { return Status(scheduler).steps(); }

v1::GenerateRequest Story(int i, int tokens) {
  static const char* const kStarts[] = {"Once upon a time", "The little dog",
                                        "Tom had a", "One day", "The sun was",
                                        "Lily and Ben", "There was a",
                                        "In the park"};
  v1::GenerateRequest req;
  req.set_prompt(absl::StrCat(kStarts[i % 8], i / 8 % 2 ? " and" : "",
                              i / 16 % 2 ? " the" : "",
                              i / 32 % 2 ? " big" : ""));
  req.set_max_tokens(tokens);
  req.set_ignore_eos(true);
  req.set_return_token_ids(true);
  return req;
}

// `serve --cells 2` on stories260K, one thread per cell.
absl::StatusOr<std::unique_ptr<ServeInstance>> StartTwoStoryCells() {
  return ServeInstance::Start({"--model", Stories260K(), "--tokenizer",
                               Stories260KTokenizer(), "--kv-memory", "64M",
                               "--cells", "2", "--threads", "2"});
}

TEST(CellsTest, StreamsSpreadOverCellsAndSurviveOneCellsEngineDying) {
  if (Stories260K().empty()) GTEST_SKIP() << "no ../shared/models/stories260K";
  auto s = StartTwoStoryCells();
  ASSERT_TRUE(s.ok()) << s.status();
  auto& serve = **s;
  const std::vector<std::string> cells = serve.SchedulerTargets();
  const std::vector<pid_t> engines = serve.EnginePids();
  ASSERT_EQ(cells.size(), 2u) << serve.log();
  ASSERT_EQ(engines.size(), 2u);
  std::vector<v1::GenerateRequest> reqs;
  std::vector<std::vector<int32_t>> solo;
  auto client = serve.Client();
  for (int i = 0; i < 64; ++i) {
    reqs.push_back(Story(i, 64));
    GenerateResult r = Generate(client.get(), reqs.back());
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    solo.push_back(r.token_ids);
  }
  for (int round = 0; round < 2; ++round) {
    const bool kill_one = round == 1;
    const int64_t steps0 = Steps(cells[0]), steps1 = Steps(cells[1]);
    std::vector<GenerateResult> out(reqs.size());
    std::atomic<int64_t> deltas{0};
    std::vector<std::thread> threads;
    for (size_t i = 0; i < reqs.size(); ++i) {
      threads.emplace_back([&, i] {
        auto stub = serve.Client();
        out[i] = Generate(stub.get(), reqs[i], &deltas);
      });
    }
    if (kill_one) {
      while (deltas.load() < 64 * 64 / 4) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      ASSERT_EQ(kill(engines[0], SIGKILL), 0);
      std::printf("kill -9 cell 0's engine %d after %lld deltas\n", engines[0],
                  static_cast<long long>(deltas.load()));
    }
    for (std::thread& t : threads) t.join();
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(out[i].status.ok())
          << "round " << round << ", stream " << i << ": "
          << out[i].status.error_message();
      EXPECT_EQ(out[i].token_ids, solo[i]) << "round " << round << ", " << i;
    }
    const int64_t d0 = Steps(cells[0]) - steps0, d1 = Steps(cells[1]) - steps1;
    std::printf("round %d: steps on cell 0: %lld, cell 1: %lld\n", round,
                static_cast<long long>(d0), static_cast<long long>(d1));
    if (!kill_one) {
      EXPECT_GT(d0, 0);
      EXPECT_GT(d1, 0);
    } else {
      // Cell 0's streams moved: cell 1 took them with their tokens so far.
      EXPECT_GT(Status(cells[1]).resumed_requests(), 0) << serve.log();
      EXPECT_NE(serve.log().find("moved its"), std::string::npos);
    }
  }
}

TEST(CellsTest, RequestsSharingALongPrefixLandOnOneCellsCache) {
  const std::string model = SmolLm2();
  if (model.empty()) GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not cached";
  auto s = ServeInstance::Start({"--model", model, "--kv-memory", "256M",
                                 "--cells", "2", "--threads", "2"});
  ASSERT_TRUE(s.ok()) << s.status();
  auto& serve = **s;
  const std::vector<std::string> cells = serve.SchedulerTargets();
  ASSERT_EQ(cells.size(), 2u);
  auto client = serve.Client();
  // A system prompt of 1,536 tokens (tokenized by the front end).
  std::string system;
  for (int i = 0; system.size() < 20000; ++i) {
    system += absl::StrCat("Rule ", i, ": answer briefly and politely. ");
  }
  grpc::ClientContext tctx;
  v1::TokenizeRequest treq;
  treq.set_text(system);
  v1::TokenizeResponse tresp;
  ASSERT_TRUE(client->Tokenize(&tctx, treq, &tresp).ok());
  ASSERT_GE(tresp.token_ids_size(), 1536);
  std::vector<int32_t> prefix(tresp.token_ids().begin(),
                              tresp.token_ids().begin() + 1536);
  auto request = [&](int i) {
    v1::GenerateRequest req;
    req.mutable_prompt_ids()->Add(prefix.begin(), prefix.end());
    for (int t : {100 + i, 200 + i, 300 + i}) req.add_prompt_ids(t);
    req.set_max_tokens(4);
    req.set_return_token_ids(true);
    return req;
  };
  const int64_t steps0 = Steps(cells[0]), steps1 = Steps(cells[1]);
  GenerateResult first = Generate(client.get(), request(0));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  std::vector<GenerateResult> out(31);
  std::vector<std::thread> threads;
  for (int i = 0; i < 31; ++i) {
    threads.emplace_back([&, i] {
      auto stub = serve.Client();
      out[i] = Generate(stub.get(), request(i + 1));
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 31; ++i) {
    ASSERT_TRUE(out[i].status.ok()) << i << ": " << out[i].status.error_message();
    const v1::Usage& u = out[i].final.usage();
    EXPECT_GE(u.cached_tokens(), 0.9 * u.prompt_tokens())
        << "request " << i + 1 << ": " << u.cached_tokens() << " of "
        << u.prompt_tokens() << " prompt tokens from the cache";
  }
  const int64_t d0 = Steps(cells[0]) - steps0, d1 = Steps(cells[1]) - steps1;
  std::printf("steps on cell 0: %lld, cell 1: %lld\n",
              static_cast<long long>(d0), static_cast<long long>(d1));
  EXPECT_TRUE(d0 == 0 || d1 == 0) << "the shared prefix was split over cells";
}

// A second front end (its own process) that knows the cells only by name:
// dns:///localhost:PORT for each cell's scheduler port. It routes over both
// cells and streams exactly what serve's own front end streams.
TEST(CellsTest, FrontendFindsCellsByDnsName) {
  if (Stories260K().empty()) GTEST_SKIP() << "no ../shared/models/stories260K";
  auto s = StartTwoStoryCells();
  ASSERT_TRUE(s.ok()) << s.status();
  auto& serve = **s;
  const std::vector<std::string> cells = serve.SchedulerTargets();
  ASSERT_EQ(cells.size(), 2u);
  std::string sources;
  for (const std::string& cell : cells) {
    const std::string port = cell.substr(cell.rfind(':') + 1);
    absl::StrAppend(&sources, sources.empty() ? "" : ",", "dns:///localhost:", port);
  }
  const int port = FreePortGuess();
  const std::string log = std::filesystem::temp_directory_path() /
                          absl::StrCat("pdserve-dns-fe-", getpid(), ".log");
  const pid_t pid = fork();
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stderr);
    std::freopen(log.c_str(), "a", stdout);
    execl(PdserveBinary().c_str(), "pdserve", "frontend", "--tokenizer",
          Stories260KTokenizer().c_str(), "--scheduler", sources.c_str(),
          "--port", absl::StrCat(port).c_str(), "--http-port", "0",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(pid, 0);
  auto dns_client = v1::Inference::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  auto client = serve.Client();
  // Up when it answers a first request (bounded).
  GenerateResult probe;
  for (int i = 0; i < 300; ++i) {
    probe = Generate(dns_client.get(), Story(0, 4));
    if (probe.status.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(probe.status.ok()) << probe.status.error_message();
  const int64_t steps0 = Steps(cells[0]), steps1 = Steps(cells[1]);
  std::vector<GenerateResult> out(16);
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      auto stub = v1::Inference::NewStub(grpc::CreateChannel(
          absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
      out[i] = Generate(stub.get(), Story(i, 32));
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(out[i].status.ok()) << i << ": " << out[i].status.error_message();
    EXPECT_EQ(out[i].token_ids, Generate(client.get(), Story(i, 32)).token_ids) << i;
  }
  EXPECT_GT(Steps(cells[0]), steps0);
  EXPECT_GT(Steps(cells[1]), steps1);
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find("routing over"), std::string::npos) << text;
  std::filesystem::remove(log);
}

}  // namespace
}  // namespace pdserve::testing
