// Scheduler.WatchStatus end to end: the pure schedule of one watch, the
// scheduler's StatusWatchHub behind a real gRPC server on loopback, and a
// front end's CellRouter that follows the stream (loads, a lost engine, a
// scheduler that goes away, one that only answers GetStatus).
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/rpc_util.h"
#include "scheduler/status_watch.h"
#include "server/frontend/cell_router.h"

namespace pdserve {
namespace {

using scheduler::ShellStatus;
using scheduler::StatusWatchHub;
using scheduler::WatchSchedule;

TEST(WatchScheduleTest, ClampsItsIntervals) {
  v1::WatchStatusRequest r;
  WatchSchedule defaults(r);
  EXPECT_EQ(defaults.min_interval_ms(), 25);
  EXPECT_EQ(defaults.heartbeat_ms(), 1000);
  r.set_min_interval_ms(1);
  r.set_heartbeat_ms(2);
  WatchSchedule low(r);
  EXPECT_EQ(low.min_interval_ms(), 5);
  EXPECT_EQ(low.heartbeat_ms(), 5);  // never below the interval
  r.set_min_interval_ms(50000);
  r.set_heartbeat_ms(99999);
  WatchSchedule high(r);
  EXPECT_EQ(high.min_interval_ms(), 1000);
  EXPECT_EQ(high.heartbeat_ms(), 10000);
}

TEST(WatchScheduleTest, SendsFirstThenOnChangeThrottledThenHeartbeat) {
  v1::WatchStatusRequest r;
  r.set_min_interval_ms(20);
  r.set_heartbeat_ms(500);
  WatchSchedule w(r);
  ShellStatus s;
  s.engine_ready = true;
  ASSERT_TRUE(w.Due(s, 0));
  w.Sent(s, 0);
  EXPECT_FALSE(w.Due(s, 10));   // nothing changed
  EXPECT_FALSE(w.Due(s, 499));  // still nothing: no heartbeat yet
  EXPECT_TRUE(w.Due(s, 500));   // heartbeat
  w.Sent(s, 500);
  ShellStatus busier = s;
  busier.waiting = 3;
  EXPECT_FALSE(w.Due(busier, 510));  // changed, but within the interval
  EXPECT_TRUE(w.Due(busier, 520));
  w.Sent(busier, 520);
  // Counters and the step time alone are no change worth a message.
  ShellStatus counters = busier;
  counters.steps += 100;
  counters.step_ms = 42;
  EXPECT_FALSE(w.Due(counters, 600));
  // Each field a router acts on is.
  for (auto change : std::vector<std::function<void(ShellStatus&)>>{
           [](ShellStatus& x) { x.engine_ready = false; },
           [](ShellStatus& x) { x.running = 9; },
           [](ShellStatus& x) { x.free_kv_pages = 7; },
           [](ShellStatus& x) { x.cached_kv_pages = 2; },
           [](ShellStatus& x) { x.total_kv_pages = 64; },
           [](ShellStatus& x) { x.max_seq_len = 4096; },
           [](ShellStatus& x) { x.role = "decode"; },
           [](ShellStatus& x) { x.recovering = true; }}) {
    ShellStatus changed = busier;
    change(changed);
    EXPECT_TRUE(w.Due(changed, 600));
  }
}

// A scheduler stand-in: GetStatus and WatchStatus over a status the test
// sets (WatchStatus through the real hub); `watch` false answers
// WatchStatus UNIMPLEMENTED, as a scheduler from before it would.
class FakeScheduler final : public v1::Scheduler::CallbackService {
 public:
  explicit FakeScheduler(bool watch)
      : watch_(watch), hub_([this] { return Get(); }) {}
  ~FakeScheduler() override { hub_.Stop(); }

  void Set(const ShellStatus& s) {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = s;
  }
  ShellStatus Get() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }
  StatusWatchHub& hub() { return hub_; }

  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx,
                                      const v1::GetStatusRequest*,
                                      v1::SchedulerStatus* resp) override {
    *resp = scheduler::ToProto(Get());
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerWriteReactor<v1::SchedulerStatus>* WatchStatus(
      grpc::CallbackServerContext* ctx,
      const v1::WatchStatusRequest* req) override {
    if (watch_) return hub_.Watch(*req);
    return v1::Scheduler::CallbackService::WatchStatus(ctx, req);
  }

 private:
  const bool watch_;
  std::mutex mu_;
  ShellStatus status_;
  StatusWatchHub hub_;
};

ShellStatus Ready(int32_t waiting, int64_t free_pages) {
  ShellStatus s;
  s.engine_ready = true;
  s.waiting = waiting;
  s.max_seq_len = 2048;
  s.total_kv_pages = 128;
  s.free_kv_pages = free_pages;
  s.cached_kv_pages = 3;
  s.step_ms = 12.5;
  s.role = "both";
  return s;
}

// Waits up to 5 s for `done`.
bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 500; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

struct Cell {
  explicit Cell(bool watch) : fake(watch) {
    auto started = rpc::StartServer("127.0.0.1", 0, {&fake});
    EXPECT_TRUE(started.ok()) << started.status();
    server = std::move(started->server);
    target = absl::StrCat("127.0.0.1:", started->port);
  }
  ~Cell() { Stop(); }
  void Stop() {
    if (server == nullptr) return;
    fake.hub().Stop();
    server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::seconds(2));
    server.reset();
  }
  FakeScheduler fake;
  std::unique_ptr<grpc::Server> server;
  std::string target;
};

TEST(StatusWatchTest, RouterFollowsStreamedLoadsAndLostEngines) {
  Cell a(/*watch=*/true), b(/*watch=*/true);
  a.fake.Set(Ready(0, 100));
  b.fake.Set(Ready(0, 90));
  std::atomic<int> lost{0};
  std::string lost_target;
  std::mutex lost_mu;
  frontend::CellRouter::Options options;
  // Polling alone would take 60 s to see anything: what the test sees
  // arrives over the streams.
  options.poll_interval_ms = 60000;
  options.on_engine_lost = [&](const std::string& t) {
    std::lock_guard<std::mutex> lock(lost_mu);
    lost_target = t;
    ++lost;
  };
  auto router = frontend::CellRouter::Create({a.target, b.target}, options);
  ASSERT_TRUE(router.ok()) << router.status();
  (*router)->Start();
  auto load = [&](size_t i) { return (*router)->Loads()[i]; };
  ASSERT_TRUE(Eventually([&] { return load(0).ready && load(1).ready; }));
  EXPECT_EQ(load(0).total_kv_pages, 128);
  EXPECT_EQ(load(0).free_kv_pages, 100);
  EXPECT_EQ(load(1).free_kv_pages, 90);
  EXPECT_EQ(load(0).cached_kv_pages, 3);
  EXPECT_DOUBLE_EQ(load(0).step_ms, 12.5);
  EXPECT_EQ(load(0).max_seq_len, 2048);
  // Both watchers are on their streams (and got their first status).
  ASSERT_TRUE(Eventually([&] {
    return a.fake.hub().open() == 1 && b.fake.hub().open() == 1 &&
           (*router)->StreamedStatuses() >= 2;
  }));

  // Equal queues: the cell with more free KV pages takes a prompt without
  // a whole page (no prefix key).
  EXPECT_EQ((*router)->Pick(std::vector<int32_t>{1, 2, 3}).target, a.target);

  // A queue builds up on a: the router hears it without a poll.
  a.fake.Set(Ready(7, 20));
  ASSERT_TRUE(Eventually([&] { return load(0).waiting == 7; }));
  EXPECT_EQ(load(0).free_kv_pages, 20);
  EXPECT_GE((*router)->StreamedStatuses(), 3);

  // a's engine goes while its scheduler answers: reported once, b ready.
  ShellStatus gone = Ready(0, 0);
  gone.engine_ready = false;
  a.fake.Set(gone);
  ASSERT_TRUE(Eventually([&] { return lost.load() == 1; }));
  {
    std::lock_guard<std::mutex> lock(lost_mu);
    EXPECT_EQ(lost_target, a.target);
  }
  EXPECT_FALSE(load(0).ready);
  EXPECT_EQ((*router)->Pick(std::vector<int32_t>{1, 2, 3}).target, b.target);

  // b's scheduler goes away: b is not ready, and no engine loss is
  // claimed for it (the front end resubmits its streams instead).
  b.Stop();
  ASSERT_TRUE(Eventually([&] { return !load(1).ready; }));
  EXPECT_EQ(lost.load(), 1);

  // a's engine is back: a is ready again on the same stream.
  a.fake.Set(Ready(1, 64));
  ASSERT_TRUE(Eventually([&] { return load(0).ready; }));
  EXPECT_EQ(load(0).waiting, 1);
  router->reset();  // the watchers cancel their streams
  ASSERT_TRUE(Eventually([&] { return a.fake.hub().open() == 0; }));
}

TEST(StatusWatchTest, AnOlderSchedulerIsPolled) {
  Cell old(/*watch=*/false);
  old.fake.Set(Ready(2, 50));
  frontend::CellRouter::Options options;
  options.poll_interval_ms = 20;
  auto router = frontend::CellRouter::Create({old.target}, options);
  ASSERT_TRUE(router.ok()) << router.status();
  (*router)->Start();
  ASSERT_TRUE(Eventually([&] { return (*router)->Loads()[0].ready; }));
  old.fake.Set(Ready(5, 40));
  ASSERT_TRUE(Eventually([&] { return (*router)->Loads()[0].waiting == 5; }));
  EXPECT_EQ((*router)->StreamedStatuses(), 0);
}

TEST(StatusWatchTest, StoppedHubEndsWatchesAndRefusesNewOnes) {
  Cell cell(/*watch=*/true);
  cell.fake.Set(Ready(0, 10));
  auto stub = v1::Scheduler::NewStub(rpc::MakeChannel(cell.target));
  grpc::ClientContext ctx;
  auto reader = stub->WatchStatus(&ctx, v1::WatchStatusRequest());
  v1::SchedulerStatus s;
  ASSERT_TRUE(reader->Read(&s));
  EXPECT_TRUE(s.engine_ready());
  EXPECT_EQ(s.free_kv_pages(), 10);
  cell.fake.hub().Stop();
  while (reader->Read(&s)) {
  }
  EXPECT_TRUE(reader->Finish().ok());
  grpc::ClientContext again;
  auto refused = stub->WatchStatus(&again, v1::WatchStatusRequest());
  EXPECT_FALSE(refused->Read(&s));
  const grpc::Status status = refused->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
}

}  // namespace
}  // namespace pdserve
