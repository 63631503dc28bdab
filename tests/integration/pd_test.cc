// Prefill/decode disaggregation (issue 17, item 3), with real processes on
// loopback:
//  - `serve --cells 2 --prefill-cells 1` on stories260K: every request with
//    a long prompt is prefilled on the prefill cell, its KV handed to the
//    decode cell, and streams exactly the greedy tokens of one `both` cell;
//  - the hybrid Qwen3.5 (linear-attention state in the hand-off), through
//    the schedulers' own API (the tiny model has no tokenizer for a front
//    end): a prefill_only request on a prefill cell, then its continuation
//    on a decode cell from the hand-off, equals the whole request run on
//    the decode cell; a decode cell started with another --max-seq-len
//    refuses the hand-off with the capacity contract's message and the
//    request still completes, prefilled there.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
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

v1::GenerateRequest LongStory(int i) {
  v1::GenerateRequest req;
  std::string prompt = absl::StrCat("Story ", i, ". ");
  static const char* const kWords[] = {"Once upon a time there was a little",
                                       "girl named Lily who liked to play",
                                       "in the park with her big red ball."};
  for (int k = 0; k < 6 + i % 3; ++k) prompt += kWords[(i + k) % 3];
  req.set_prompt(prompt);
  req.set_max_tokens(24);
  req.set_ignore_eos(true);
  req.set_return_token_ids(true);
  return req;
}

TEST(PrefillDecodeTest, SplitRequestsStreamTheTokensOfOneCell) {
  if (Stories260K().empty()) GTEST_SKIP() << "no ../shared/models/stories260K";
  const int kRequests = 12;
  std::vector<std::vector<int32_t>> solo(kRequests);
  {
    auto one = StartStories260K({"--kv-memory", "64M"});
    ASSERT_TRUE(one.ok()) << one.status();
    auto client = (*one)->Client();
    for (int i = 0; i < kRequests; ++i) {
      GenerateResult r = Generate(client.get(), LongStory(i));
      ASSERT_TRUE(r.status.ok()) << r.status.error_message();
      ASSERT_EQ(r.token_ids.size(), 24u);
      solo[i] = r.token_ids;
    }
  }
  // Through shared memory (the default: both engines on this host), then
  // over the engines' gRPC stream.
  for (const bool shm : {true, false}) {
    SCOPED_TRACE(shm ? "shared memory" : "gRPC stream");
    std::vector<std::string> args = {
        "--model", Stories260K(), "--tokenizer", Stories260KTokenizer(),
        "--kv-memory", "64M", "--cells", "2", "--prefill-cells", "1",
        "--pd-min-prompt-tokens", "32", "--threads", "2"};
    if (!shm) args.push_back("--no-shm-handoff");
    auto s = ServeInstance::Start(args);
    ASSERT_TRUE(s.ok()) << s.status();
    auto& serve = **s;
    const std::vector<std::string> cells = serve.SchedulerTargets();
    ASSERT_EQ(cells.size(), 2u) << serve.log();
    EXPECT_EQ(Status(cells[0]).role(), "prefill");
    EXPECT_EQ(Status(cells[1]).role(), "decode");
    std::vector<GenerateResult> out(kRequests);
    std::vector<std::thread> threads;
    for (int i = 0; i < kRequests; ++i) {
      threads.emplace_back([&, i] {
        auto stub = serve.Client();
        out[i] = Generate(stub.get(), LongStory(i));
      });
    }
    for (std::thread& t : threads) t.join();
    for (int i = 0; i < kRequests; ++i) {
      ASSERT_TRUE(out[i].status.ok())
          << i << ": " << out[i].status.error_message();
      EXPECT_EQ(out[i].token_ids, solo[i]) << i;
      EXPECT_EQ(out[i].final.finish_reason(), v1::FINISH_REASON_LENGTH);
    }
    const v1::SchedulerStatus prefill = Status(cells[0]);
    const v1::SchedulerStatus decode = Status(cells[1]);
    EXPECT_EQ(prefill.handoffs_exported(), kRequests) << serve.log();
    EXPECT_EQ(decode.handoffs_imported(), kRequests) << serve.log();
    EXPECT_EQ(decode.handoffs_refused(), 0);
    EXPECT_EQ(decode.handoffs_shared_memory(), shm ? kRequests : 0);
    // A short prompt skips the hop: served on the decode cell alone.
    v1::GenerateRequest brief = LongStory(0);
    brief.set_prompt("Once");
    auto client = serve.Client();
    GenerateResult r = Generate(client.get(), brief);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(Status(cells[0]).handoffs_exported(), kRequests);
  }
}

// `pdserve <args>` as a child (stderr to `err`); killed when destroyed.
class Child {
 public:
  Child(const std::vector<std::string>& args, const std::string& err) {
    pid_ = fork();
    if (pid_ == 0) {
      FILE* f = std::freopen(err.c_str(), "w", stderr);
      FILE* o = std::freopen("/dev/null", "w", stdout);
      (void)f;
      (void)o;
      std::vector<char*> argv;
      const std::string bin = PdserveBinary();
      argv.push_back(const_cast<char*>(bin.c_str()));
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

 private:
  pid_t pid_ = -1;
};

// An engine + scheduler pair on free loopback ports.
struct Cell {
  std::string scheduler, engine, scheduler_log;
  std::vector<std::unique_ptr<Child>> children;
};

Cell StartCell(const std::string& model, const std::string& role,
               const std::string& max_seq_len) {
  Cell c;
  const std::string dir = ::testing::TempDir();
  const int engine_port = FreePortGuess(), sched_port = FreePortGuess();
  c.engine = absl::StrCat("127.0.0.1:", engine_port);
  c.scheduler = absl::StrCat("127.0.0.1:", sched_port);
  c.scheduler_log = absl::StrCat(dir, "/pd_sched_", sched_port, ".log");
  c.children.push_back(std::make_unique<Child>(
      std::vector<std::string>{"engine", "--model", model, "--port",
                               absl::StrCat(engine_port), "--threads", "1",
                               "--kv-memory", "32M", "--max-seq-len",
                               max_seq_len, "--metrics-port", "0"},
      absl::StrCat(dir, "/pd_engine_", engine_port, ".log")));
  c.children.push_back(std::make_unique<Child>(
      std::vector<std::string>{"scheduler", "--engine", c.engine, "--port",
                               absl::StrCat(sched_port), "--role", role,
                               "--metrics-port", "0"},
      c.scheduler_log));
  return c;
}

bool WaitReady(const Cell& c) {
  for (int i = 0; i < 300; ++i) {
    if (Status(c.scheduler).engine_ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

struct Submitted {
  grpc::Status status;
  std::vector<int32_t> tokens;
  v1::TokenEvent last;
};

Submitted Submit(const std::string& scheduler, const v1::SubmitRequest& req) {
  auto stub = v1::Scheduler::NewStub(
      grpc::CreateChannel(scheduler, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub->Submit(&ctx, req);
  Submitted out;
  v1::TokenEvent event;
  while (reader->Read(&event)) {
    out.tokens.insert(out.tokens.end(), event.token_ids().begin(),
                      event.token_ids().end());
    out.last = event;
  }
  out.status = reader->Finish();
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(PrefillDecodeTest, HybridHandoffAndCapacityRefusal) {
  const std::string model =
      std::string(PDSERVE_TESTDATA_DIR) + "/hybrid/tiny_qwen35.gguf";
  Cell prefill = StartCell(model, "prefill", "256");
  Cell decode = StartCell(model, "decode", "256");
  Cell other = StartCell(model, "decode", "128");
  ASSERT_TRUE(WaitReady(prefill) && WaitReady(decode) && WaitReady(other));

  v1::SubmitRequest req;
  for (int i = 0; i < 70; ++i) req.add_prompt_ids(1 + (i * 31 + 7) % 79);  // vocabulary 80
  req.set_max_new_tokens(16);
  const Submitted whole = Submit(decode.scheduler, [&] {
    v1::SubmitRequest r = req;
    r.set_request_id("whole");
    return r;
  }());
  ASSERT_TRUE(whole.status.ok()) << whole.status.error_message();
  ASSERT_EQ(whole.tokens.size(), 16u);

  for (const Cell* target : {&decode, &other}) {
    v1::SubmitRequest first = req;
    first.set_request_id(absl::StrCat("split-", target->scheduler));
    first.set_prefill_only(true);
    const Submitted p = Submit(prefill.scheduler, first);
    ASSERT_TRUE(p.status.ok()) << p.status.error_message();
    ASSERT_EQ(p.tokens.size(), 1u);
    EXPECT_EQ(p.tokens[0], whole.tokens[0]);
    ASSERT_TRUE(p.last.has_prefill_done());
    EXPECT_EQ(p.last.finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
    EXPECT_EQ(p.last.prefill_done().engine(), prefill.engine);
    EXPECT_NE(p.last.prefill_done().handoff_id(), 0u);
    EXPECT_EQ(p.last.prefill_done().tokens(), 70);

    v1::SubmitRequest rest = req;
    rest.set_request_id(first.request_id());
    rest.add_generated_ids(p.tokens[0]);
    *rest.mutable_kv_source() = p.last.prefill_done();
    const Submitted d = Submit(target->scheduler, rest);
    ASSERT_TRUE(d.status.ok()) << d.status.error_message();
    std::vector<int32_t> all = p.tokens;
    all.insert(all.end(), d.tokens.begin(), d.tokens.end());
    EXPECT_EQ(all, whole.tokens) << target->scheduler;
    EXPECT_EQ(d.last.finish_reason(), v1::FINISH_REASON_LENGTH);
  }
  EXPECT_EQ(Status(prefill.scheduler).handoffs_exported(), 2);
  EXPECT_EQ(Status(decode.scheduler).handoffs_imported(), 1);
  EXPECT_EQ(Status(decode.scheduler).handoffs_refused(), 0);
  EXPECT_EQ(Status(other.scheduler).handoffs_imported(), 0);
  EXPECT_EQ(Status(other.scheduler).handoffs_refused(), 1);
  EXPECT_NE(ReadFile(other.scheduler_log)
                .find("prefill KV capacity 256 != decode KV capacity 128"),
            std::string::npos)
      << ReadFile(other.scheduler_log);
}

}  // namespace
}  // namespace pdserve::testing
