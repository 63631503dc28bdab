#include "server/frontend/cell_router.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "proto/rpc_util.h"

namespace pdserve::frontend {
std::vector<std::string> SplitTargets(const std::string& list) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty()) out.emplace_back(part);
  }
  return out;
}

absl::StatusOr<CellSource> ParseCellSource(const std::string& text) {
  CellSource source;
  source.text = text;
  absl::string_view rest = text;
  if (!absl::ConsumePrefix(&rest, "dns:///") &&
      !absl::ConsumePrefix(&rest, "dns:")) {
    return source;
  }
  source.dns = true;
  const size_t colon = rest.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(rest.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--scheduler ", text,
        ": a dns source is dns:///NAME:PORT with a port in [1, 65535]"));
  }
  source.host = std::string(rest.substr(0, colon));
  source.port = std::string(rest.substr(colon + 1));
  return source;
}

absl::StatusOr<std::vector<std::string>> ResolveAddresses(
    const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("resolving ", host, ": ", gai_strerror(rc)));
  }
  std::vector<std::string> out;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char ip[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr,
                ip, sizeof(ip));
      out.push_back(absl::StrCat(ip, ":", port));
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6,
                &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, ip,
                sizeof(ip));
      out.push_back(absl::StrCat("[", ip, "]:", port));
    }
  }
  freeaddrinfo(found);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

absl::StatusOr<std::unique_ptr<CellRouter>> CellRouter::Create(
    std::vector<std::string> sources, Options options) {
  if (sources.empty()) {
    return absl::InvalidArgumentError("--scheduler names no cell");
  }
  absl::flat_hash_set<std::string> seen;
  std::vector<CellSource> parsed;
  for (const std::string& t : sources) {
    if (!seen.insert(t).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--scheduler names cell ", t, " twice"));
    }
    auto source = ParseCellSource(t);
    if (!source.ok()) return source.status();
    parsed.push_back(*std::move(source));
  }
  if (!options.resolver) options.resolver = ResolveAddresses;
  std::unique_ptr<CellRouter> router(
      new CellRouter(std::move(parsed), std::move(options)));
  router->Resolve();
  return router;
}

CellRouter::CellRouter(std::vector<CellSource> sources, Options options)
    : sources_(std::move(sources)), options_(std::move(options)) {
  std::lock_guard<std::mutex> lock(mu_);
  resolved_.resize(sources_.size());
  for (size_t i = 0; i < sources_.size(); ++i) {
    if (!sources_[i].dns) resolved_[i] = {sources_[i].text};
  }
}

CellRouter::~CellRouter() {
  stop_ = true;
  if (poller_.joinable()) poller_.join();
  std::vector<std::unique_ptr<CellLoadWatcher>> watchers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    watching_ = false;
    watchers = std::move(watchers_);
    for (auto& w : retired_) watchers.push_back(std::move(w));
    retired_.clear();
  }
  watchers.clear();  // joins each watcher's thread, no lock held
}

void CellRouter::StartWatcherLocked(size_t cell) {
  if (watchers_.size() <= cell) watchers_.resize(cell + 1);
  CellLoadWatcher::Options w;
  w.poll_interval_ms = std::max(1, options_.poll_interval_ms);
  w.min_interval_ms = std::max(5, options_.poll_interval_ms / 4);
  const std::string target = targets_[cell];
  watchers_[cell] = std::make_unique<CellLoadWatcher>(
      stubs_[cell], w,
      [this, target](bool answered, const v1::SchedulerStatus& status) {
        ApplyStatus(target, answered, status);
      });
}

void CellRouter::TendWatchers() {
  std::vector<std::unique_ptr<CellLoadWatcher>> retired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    retired = std::move(retired_);
    retired_.clear();
    for (auto& w : watchers_) {
      if (w != nullptr) w->CheckStale();
    }
  }
}

void CellRouter::Start() {
  Poll();
  {
    std::lock_guard<std::mutex> lock(mu_);
    watching_ = options_.watch_loads;
    for (size_t i = 0; watching_ && i < targets_.size(); ++i) {
      StartWatcherLocked(i);
    }
  }
  poller_ = std::thread([this] {
    const auto poll = std::chrono::milliseconds(
        std::max(1, options_.poll_interval_ms));
    const auto resolve = std::chrono::milliseconds(
        std::max(1, options_.resolve_interval_ms));
    auto next_resolve = std::chrono::steady_clock::now() + resolve;
    // Watching, the poller only tends the watchers (a stale stream, a cell
    // that left) and the dns sources; it wakes often enough for that.
    const auto tick = options_.watch_loads
                          ? std::min(poll, std::chrono::milliseconds(250))
                          : poll;
    while (!stop_) {
      for (auto slept = std::chrono::milliseconds(0); slept < tick && !stop_;
           slept += std::chrono::milliseconds(20)) {
        std::this_thread::sleep_for(
            std::min(std::chrono::milliseconds(20), tick - slept));
      }
      if (stop_) break;
      if (std::chrono::steady_clock::now() >= next_resolve) {
        Resolve();
        next_resolve = std::chrono::steady_clock::now() + resolve;
      }
      if (options_.watch_loads) {
        TendWatchers();
      } else {
        Poll();
      }
    }
  });
}

void CellRouter::Resolve() {
  std::vector<std::optional<std::vector<std::string>>> fresh(sources_.size());
  for (size_t i = 0; i < sources_.size(); ++i) {
    if (!sources_[i].dns) continue;
    auto addresses = options_.resolver(sources_[i].host, sources_[i].port);
    if (addresses.ok()) {
      fresh[i] = *std::move(addresses);
    } else {
      std::fprintf(stderr, "pdserve frontend: --scheduler %s: %s\n",
                   sources_[i].text.c_str(),
                   std::string(addresses.status().message()).c_str());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> targets;
  absl::flat_hash_set<std::string> seen;
  for (size_t i = 0; i < sources_.size(); ++i) {
    if (fresh[i].has_value()) resolved_[i] = *std::move(fresh[i]);
    for (const std::string& t : resolved_[i]) {
      if (seen.insert(t).second) targets.push_back(t);
    }
  }
  SetTargetsLocked(targets, /*log=*/resolved_once_);
  resolved_once_ = true;
}

void CellRouter::SetTargetsLocked(const std::vector<std::string>& targets,
                                  bool log) {
  const absl::flat_hash_set<std::string> wanted(targets.begin(), targets.end());
  std::vector<std::string> kept_targets;
  std::vector<std::shared_ptr<v1::Scheduler::Stub>> kept_stubs;
  std::vector<CellLoad> kept_loads;
  std::vector<int64_t> kept_routed;
  std::vector<std::unique_ptr<CellLoadWatcher>> kept_watchers;
  absl::flat_hash_set<std::string> have;
  auto keep = [&](std::string target,
                  std::shared_ptr<v1::Scheduler::Stub> stub, CellLoad load,
                  int64_t routed, std::unique_ptr<CellLoadWatcher> watcher) {
    kept_targets.push_back(std::move(target));
    kept_stubs.push_back(std::move(stub));
    kept_loads.push_back(load);
    kept_routed.push_back(routed);
    kept_watchers.push_back(std::move(watcher));
  };
  watchers_.resize(targets_.size());
  for (size_t i = 0; i < targets_.size(); ++i) {
    if (wanted.contains(targets_[i])) {
      have.insert(targets_[i]);
      keep(targets_[i], stubs_[i], loads_[i], routed_[i],
           std::move(watchers_[i]));
    } else {
      prefixes_.Forget(targets_[i]);
      if (watchers_[i] != nullptr) retired_.push_back(std::move(watchers_[i]));
      if (log) {
        std::fprintf(stderr, "pdserve frontend: cell %s left the routing\n",
                     targets_[i].c_str());
      }
    }
  }
  for (const std::string& t : targets) {
    if (have.contains(t)) continue;
    keep(t, v1::Scheduler::NewStub(rpc::MakeChannel(t)), CellLoad{}, 0,
         nullptr);
    if (log) {
      std::fprintf(stderr, "pdserve frontend: cell %s joined the routing\n",
                   t.c_str());
    }
  }
  targets_ = std::move(kept_targets);
  stubs_ = std::move(kept_stubs);
  loads_ = std::move(kept_loads);
  routed_ = std::move(kept_routed);
  watchers_ = std::move(kept_watchers);
  for (size_t i = 0; watching_ && i < targets_.size(); ++i) {
    if (watchers_[i] == nullptr) StartWatcherLocked(i);
  }
}

namespace {

CellLoad CellLoadOf(const v1::SchedulerStatus& s) {
  CellLoad load;
  load.ready = s.engine_ready();
  load.waiting = s.waiting();
  load.running = s.running();
  load.max_seq_len = s.max_seq_len();
  load.role = ParseCellRole(s.role());
  load.total_kv_pages = s.total_kv_pages();
  load.free_kv_pages = s.free_kv_pages();
  load.cached_kv_pages = s.cached_kv_pages();
  load.step_ms = s.step_ms();
  return load;
}

}  // namespace

void CellRouter::ApplyStatus(const std::string& target, bool answered,
                             const v1::SchedulerStatus& status) {
  const CellLoad load = answered ? CellLoadOf(status) : CellLoad{};
  bool lost = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = std::find(targets_.begin(), targets_.end(), target);
    if (it == targets_.end()) return;  // it left the routing meanwhile
    const size_t cell = static_cast<size_t>(it - targets_.begin());
    // Its scheduler answers but its engine is gone: a lost engine, whose
    // streams move when another cell is ready (else the cell resumes them).
    if (loads_[cell].ready && answered && !load.ready) {
      for (size_t i = 0; i < loads_.size(); ++i) {
        lost = lost || (i != cell && loads_[i].ready);
      }
    }
    loads_[cell] = load;
  }
  if (lost && options_.on_engine_lost) options_.on_engine_lost(target);
}

void CellRouter::Poll() {
  std::vector<std::pair<std::string, std::shared_ptr<v1::Scheduler::Stub>>>
      cells;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < targets_.size(); ++i) {
      cells.emplace_back(targets_[i], stubs_[i]);
    }
  }
  // Each cell's status; a cell that does not answer is not ready.
  for (const auto& [target, stub] : cells) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(300));
    v1::SchedulerStatus s;
    const bool answered = stub->GetStatus(&ctx, {}, &s).ok();
    ApplyStatus(target, answered, s);
  }
}

bool CellRouter::WaitUntilReady(bool all, int seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (true) {
    Poll();
    int ready = 0, known = 0;
    for (const CellLoad& load : Loads()) {
      ++known;
      ready += load.ready;
    }
    if (ready > 0 && (!all || ready == known)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (known == 0) Resolve();
  }
}

bool CellRouter::CanSplit() const {
  std::lock_guard<std::mutex> lock(mu_);
  return CanSplitAcross(loads_);
}

CellRouter::Route CellRouter::Pick(absl::Span<const int32_t> prompt,
                                   CellPhase phase) {
  std::lock_guard<std::mutex> lock(mu_);
  Route r;
  if (targets_.empty()) return r;
  const RouteDecision d =
      RouteByCache(loads_, targets_, prompt, phase, turn_.fetch_add(1),
                   options_.track_prefixes ? &prefixes_ : nullptr);
  const size_t cell = d.cell < 0 ? 0 : static_cast<size_t>(d.cell);
  r.reason = d.reason;
  r.stub = stubs_[cell];
  r.target = targets_[cell];
  ++routed_[cell];
  // A routed request is waiting there until the next poll says otherwise,
  // so a burst between polls spreads instead of piling onto one cell.
  if (d.cell >= 0 && CountsAsWaiting(d.reason)) ++loads_[cell].waiting;
  return r;
}

std::vector<std::string> CellRouter::Targets() const {
  std::lock_guard<std::mutex> lock(mu_);
  return targets_;
}

std::vector<CellLoad> CellRouter::Loads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return loads_;
}

void CellRouter::SetLoads(std::vector<CellLoad> loads) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < loads_.size() && i < loads.size(); ++i) {
    loads_[i] = loads[i];
  }
}

int64_t CellRouter::ReadyCapacity() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t capacity = 0;
  for (const CellLoad& load : loads_) {
    if (!load.ready || load.max_seq_len <= 0) continue;
    capacity = capacity == 0 ? load.max_seq_len
                             : std::min(capacity, load.max_seq_len);
  }
  return capacity;
}

bool CellRouter::has_dns_source() const {
  return std::any_of(sources_.begin(), sources_.end(),
                     [](const CellSource& s) { return s.dns; });
}

int64_t CellRouter::StreamedStatuses() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& w : watchers_) n += w != nullptr ? w->received() : 0;
  return n;
}

std::vector<int64_t> CellRouter::RoutedCounts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return routed_;
}

}  // namespace pdserve::frontend
