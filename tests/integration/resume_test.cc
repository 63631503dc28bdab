// Streams that survive a crash (scheduler --engine-recovery-seconds, front
// end --scheduler-recovery-seconds): 200 greedy and 50 seeded sampled
// streams of 64 tokens through the three real processes, with the engine
// killed (kill -9, twice, at random moments) or hung past the step timeout
// (SIGSTOP, then SIGCONT), or the scheduler killed and later the scheduler
// and the engine at once. Every stream must end with FINISH_REASON_LENGTH
// and exactly the tokens the same request gets alone with nothing killed.
// The moments are drawn from a seed printed by the test
// (PDSERVE_CHAOS_SEED replays one).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/serve_harness.h"

namespace pdserve::testing {
namespace {

constexpr int kGreedy = 200, kSeeded = 50, kTokens = 64;

struct Load {
  std::vector<v1::GenerateRequest> requests;
  std::vector<std::vector<int32_t>> solo;  // tokens of each run alone
};

v1::GenerateRequest Request(int i) {
  static const char* const kStarts[] = {
      "Once upon a time", "The little dog", "Tom had a",   "One day",
      "The sun was",      "Lily and Ben",   "There was a", "In the park"};
  v1::GenerateRequest req;
  req.set_prompt(absl::StrCat(kStarts[i % 8], i / 8 % 2 ? " and" : "",
                              i / 16 % 2 ? " the" : "", i / 32 % 2 ? " big" : ""));
  req.set_max_tokens(kTokens);
  req.set_ignore_eos(true);
  req.set_return_token_ids(true);
  if (i >= kGreedy) {  // seeded sampling, with a penalty on outputs
    req.mutable_sampling()->set_temperature(1.0f);
    req.mutable_sampling()->set_top_p(0.95f);
    req.mutable_sampling()->set_seed(1000 + i);
    req.mutable_sampling()->set_frequency_penalty(0.5f);
  }
  return req;
}

Load MakeLoad(const ServeInstance& serve) {
  Load load;
  auto client = serve.Client();
  for (int i = 0; i < kGreedy + kSeeded; ++i) {
    load.requests.push_back(Request(i));
    GenerateResult r = Generate(client.get(), load.requests.back());
    EXPECT_TRUE(r.status.ok()) << i << ": " << r.status.error_message();
    EXPECT_EQ(r.token_ids.size(), static_cast<size_t>(kTokens)) << i;
    load.solo.push_back(r.token_ids);
  }
  return load;
}

uint64_t ChaosSeed() {
  const char* env = std::getenv("PDSERVE_CHAOS_SEED");
  const uint64_t seed =
      env != nullptr ? std::strtoull(env, nullptr, 10) : std::random_device()();
  std::printf("PDSERVE_CHAOS_SEED=%llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

int64_t SchedulerLosses(const ServeInstance& serve, int64_t* resumed) {
  auto scheduler = serve.SchedulerClient();
  grpc::ClientContext ctx;
  v1::SchedulerStatus status;
  if (!scheduler->GetStatus(&ctx, {}, &status).ok()) return -1;
  *resumed = status.resumed_requests();
  return status.engine_losses();
}

// Runs the whole load concurrently; `fault` runs on its own thread with the
// count of deltas received so far and a flag that turns true once every
// stream has ended. Checks every stream against its solo run.
void RunUnderFault(
    const ServeInstance& serve, const Load& load,
    const std::function<void(const std::atomic<int64_t>&,
                             const std::atomic<bool>&)>& fault) {
  const size_t n = load.requests.size();
  std::vector<GenerateResult> results(n);
  std::atomic<int64_t> deltas{0};
  std::atomic<bool> done{false};
  std::thread faulter([&] { fault(deltas, done); });
  std::vector<std::thread> streams;
  for (size_t i = 0; i < n; ++i) {
    streams.emplace_back([&, i] {
      auto stub = serve.Client();  // own channel: real concurrency
      results[i] = Generate(stub.get(), load.requests[i], &deltas);
    });
  }
  for (std::thread& t : streams) t.join();
  done = true;
  faulter.join();
  int intact = 0;
  for (size_t i = 0; i < n; ++i) {
    const GenerateResult& r = results[i];
    EXPECT_TRUE(r.status.ok()) << "stream " << i << ": "
                               << r.status.error_message();
    EXPECT_EQ(r.final.finish_reason(), v1::FINISH_REASON_LENGTH)
        << "stream " << i;
    EXPECT_EQ(r.token_ids, load.solo[i]) << "stream " << i;
    intact += r.status.ok() && r.token_ids == load.solo[i];
  }
  std::printf("%d/%zu streams complete and equal to their solo runs\n", intact,
              n);
}

// Waits (bounded) until `deltas` reaches `target` or the load ended; false
// when it ended first.
bool WaitFor(const std::atomic<int64_t>& deltas, const std::atomic<bool>& done,
             int64_t target) {
  while (deltas.load() < target && !done.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return deltas.load() >= target;
}

std::unique_ptr<ServeInstance> StartStories(std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"--kv-memory", "64M"});
  auto s = StartStories260K(extra);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// Starts serve (with `extra` arguments), makes the load and its solo runs,
// and draws the fault moments' generator.
class ResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Stories260K().empty()) GTEST_SKIP() << "no ../shared/models/stories260K";
  }
  void Begin(std::vector<std::string> extra) {
    serve_ = StartStories(std::move(extra));
    ASSERT_NE(serve_, nullptr);
    load_ = MakeLoad(*serve_);
    rng_.seed(ChaosSeed());
    total_ = static_cast<int64_t>(load_.requests.size()) * kTokens;
  }
  std::unique_ptr<ServeInstance> serve_;
  Load load_;
  std::mt19937_64 rng_;
  int64_t total_ = 0;
};

TEST_F(ResumeTest, EngineKilledTwiceUnderLoadEveryStreamCompletesUnchanged) {
  Begin({});
  ASSERT_NE(serve_, nullptr);
  ServeInstance& serve = *serve_;
  const Load& load = load_;
  std::mt19937_64& rng = rng_;
  const int64_t total = total_;
  int kills = 0;
  RunUnderFault(serve, load, [&](const std::atomic<int64_t>& deltas,
                                  const std::atomic<bool>& done) {
    int64_t at = std::uniform_int_distribution<int64_t>(
        total / 50, total / 4)(rng);
    for (int k = 0; k < 2; ++k) {
      if (!WaitFor(deltas, done, at)) return;
      const pid_t pid = CurrentEnginePid(serve);
      if (pid <= 0 || kill(pid, SIGKILL) != 0) return;
      ++kills;
      std::printf("kill -9 engine %d after %lld deltas\n", pid,
                  static_cast<long long>(deltas.load()));
      // The next kill only once the restarted engine has served some.
      while (!done.load() && CurrentEnginePid(serve) <= 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      at = deltas.load() +
           std::uniform_int_distribution<int64_t>(total / 50, total / 8)(rng);
    }
  });
  EXPECT_EQ(kills, 2) << "the load ended before the second kill";
  int64_t resumed = 0;
  EXPECT_GE(SchedulerLosses(serve, &resumed), 2);
  EXPECT_GT(resumed, 0);
  std::printf("%lld requests resumed\n", static_cast<long long>(resumed));
}

TEST_F(ResumeTest, HungEngineUnderLoadEveryStreamCompletesUnchanged) {
  Begin({"--step-timeout", "1"});
  ASSERT_NE(serve_, nullptr);
  ServeInstance& serve = *serve_;
  const Load& load = load_;
  std::mt19937_64& rng = rng_;
  const int64_t total = total_;
  bool stopped = false;
  RunUnderFault(serve, load, [&](const std::atomic<int64_t>& deltas,
                                  const std::atomic<bool>& done) {
    const int64_t at =
        std::uniform_int_distribution<int64_t>(total / 50, total / 3)(rng);
    if (!WaitFor(deltas, done, at)) return;
    const pid_t pid = CurrentEnginePid(serve);
    if (pid <= 0 || kill(pid, SIGSTOP) != 0) return;
    stopped = true;
    std::printf("SIGSTOP engine %d after %lld deltas\n", pid,
                static_cast<long long>(deltas.load()));
    const int64_t before = deltas.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    // Nothing streams while the engine is frozen (at most the results
    // already on the wire).
    EXPECT_LT(deltas.load() - before, 2 * 64);
    kill(pid, SIGCONT);
  });
  EXPECT_TRUE(stopped) << "the load ended before the engine was stopped";
  int64_t resumed = 0;
  EXPECT_GE(SchedulerLosses(serve, &resumed), 1);
  EXPECT_GT(resumed, 0);
}

// Waits (at most 60 s, or until the load ended) for a restarted `role`
// process other than `old_pid` whose scheduler reports the engine ready.
void WaitRestarted(const ServeInstance& serve, const std::string& role,
                   pid_t old_pid, const std::atomic<bool>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done.load() && std::chrono::steady_clock::now() < deadline) {
    const pid_t pid = ChildPid(serve, role);
    auto scheduler = serve.SchedulerClient();
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    v1::SchedulerStatus status;
    if (pid > 0 && pid != old_pid &&
        scheduler->GetStatus(&ctx, {}, &status).ok() && status.engine_ready()) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The scheduler is killed (kill -9) at a random moment, and later the
// scheduler and the engine at once: the front end resubmits every open
// stream with the tokens it has, the restarted scheduler waits for the
// restarted engine, and every stream completes unchanged.
TEST_F(ResumeTest, SchedulerKilledThenBothUnderLoadEveryStreamCompletesUnchanged) {
  Begin({});
  ASSERT_NE(serve_, nullptr);
  ServeInstance& serve = *serve_;
  const Load& load = load_;
  std::mt19937_64& rng = rng_;
  const int64_t total = total_;
  int faults = 0;
  RunUnderFault(serve, load, [&](const std::atomic<int64_t>& deltas,
                                  const std::atomic<bool>& done) {
    const int64_t at =
        std::uniform_int_distribution<int64_t>(total / 50, total / 4)(rng);
    if (!WaitFor(deltas, done, at)) return;
    const pid_t scheduler = ChildPid(serve, "scheduler");
    if (scheduler <= 0 || kill(scheduler, SIGKILL) != 0) return;
    ++faults;
    std::printf("kill -9 scheduler %d after %lld deltas\n", scheduler,
                static_cast<long long>(deltas.load()));
    WaitRestarted(serve, "scheduler", scheduler, done);
    const int64_t next = deltas.load() + std::uniform_int_distribution<int64_t>(
                                             total / 50, total / 8)(rng);
    if (!WaitFor(deltas, done, next)) return;
    const pid_t scheduler2 = ChildPid(serve, "scheduler");
    const pid_t engine = ChildPid(serve, "engine");
    if (scheduler2 <= 0 || engine <= 0) return;
    kill(engine, SIGKILL);
    kill(scheduler2, SIGKILL);
    ++faults;
    std::printf("kill -9 scheduler %d and engine %d after %lld deltas\n",
                scheduler2, engine, static_cast<long long>(deltas.load()));
  });
  EXPECT_EQ(faults, 2) << "the load ended before the second fault";
  // The scheduler restarted last took the front end's resubmissions of
  // the streams still open at the second fault, and counts them.
  auto scheduler = serve.SchedulerClient();
  grpc::ClientContext ctx;
  v1::SchedulerStatus status;
  ASSERT_TRUE(scheduler->GetStatus(&ctx, {}, &status).ok());
  EXPECT_GT(status.resumed_requests(), 0);
  EXPECT_GT(status.recomputed_tokens(), status.resumed_requests());
}

}  // namespace
}  // namespace pdserve::testing
