#include "server/frontend/cell_router.h"

#include <algorithm>
#include <chrono>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "proto/rpc_util.h"

namespace pdserve::frontend {
namespace {

// SplitMix64 finaliser: a well-mixed 64-bit hash step.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t HashString(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, then mixed
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return Mix(h);
}

bool LessLoaded(const CellLoad& a, const CellLoad& b) {
  return a.waiting != b.waiting ? a.waiting < b.waiting : a.running < b.running;
}

}  // namespace

const char* RouteReasonName(RouteReason reason) {
  switch (reason) {
    case RouteReason::kPrefix: return "prefix";
    case RouteReason::kSpilled: return "spilled";
    case RouteReason::kLeastLoaded: return "least_loaded";
    case RouteReason::kNoneReady: return "none_ready";
  }
  return "unknown";
}

std::optional<uint64_t> PrefixKey(absl::Span<const int32_t> prompt,
                                  int64_t page_tokens, int64_t max_tokens) {
  if (page_tokens <= 0) return std::nullopt;
  const int64_t n =
      std::min<int64_t>(static_cast<int64_t>(prompt.size()), max_tokens) /
      page_tokens * page_tokens;
  if (n == 0) return std::nullopt;
  uint64_t h = Mix(static_cast<uint64_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    h = Mix(h ^ static_cast<uint32_t>(prompt[i]));
  }
  return h;
}

RouteDecision PickCell(absl::Span<const CellLoad> cells,
                       absl::Span<const std::string> cell_ids,
                       std::optional<uint64_t> key, uint64_t turn,
                       int64_t spill_waiting) {
  RouteDecision d;
  int least = -1;
  int64_t ties = 0;
  for (int i = 0; i < static_cast<int>(cells.size()); ++i) {
    if (!cells[i].ready) continue;
    if (least < 0 || LessLoaded(cells[i], cells[least])) {
      least = i;
      ties = 1;
    } else if (!LessLoaded(cells[least], cells[i])) {
      ++ties;
    }
  }
  if (least < 0) return d;
  if (key.has_value()) {
    int best = -1;
    uint64_t best_score = 0;
    for (int i = 0; i < static_cast<int>(cells.size()); ++i) {
      if (!cells[i].ready) continue;
      const uint64_t score = Mix(*key ^ HashString(cell_ids[i]));
      if (best < 0 || score > best_score) {
        best = i;
        best_score = score;
      }
    }
    if (cells[best].waiting <= cells[least].waiting + spill_waiting) {
      return {best, RouteReason::kPrefix};
    }
    d.reason = RouteReason::kSpilled;
  } else {
    d.reason = RouteReason::kLeastLoaded;
  }
  // The (turn % ties)-th of the equally least loaded cells.
  int64_t skip = static_cast<int64_t>(turn % static_cast<uint64_t>(ties));
  for (int i = 0; i < static_cast<int>(cells.size()); ++i) {
    if (!cells[i].ready || LessLoaded(cells[least], cells[i])) continue;
    if (skip-- == 0) {
      d.cell = i;
      break;
    }
  }
  return d;
}

std::vector<std::string> SplitTargets(const std::string& list) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty()) out.emplace_back(part);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<CellRouter>> CellRouter::Create(
    std::vector<std::string> targets) {
  if (targets.empty()) {
    return absl::InvalidArgumentError("--scheduler names no cell");
  }
  absl::flat_hash_set<std::string> seen;
  for (const std::string& t : targets) {
    if (!seen.insert(t).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--scheduler names cell ", t, " twice"));
    }
  }
  return std::unique_ptr<CellRouter>(new CellRouter(std::move(targets)));
}

CellRouter::CellRouter(std::vector<std::string> targets)
    : targets_(std::move(targets)),
      loads_(targets_.size()),
      routed_(targets_.size(), 0) {
  for (const std::string& t : targets_) {
    stubs_.push_back(v1::Scheduler::NewStub(rpc::MakeChannel(t)));
  }
}

CellRouter::~CellRouter() {
  stop_ = true;
  if (poller_.joinable()) poller_.join();
}

void CellRouter::Start(int interval_ms) {
  interval_ms_ = std::max(1, interval_ms);
  Poll();
  poller_ = std::thread([this] {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms_));
      if (!stop_) Poll();
    }
  });
}

void CellRouter::Poll() {
  std::vector<CellLoad> loads(targets_.size());
  for (size_t i = 0; i < targets_.size(); ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(300));
    v1::SchedulerStatus s;
    if (!stubs_[i]->GetStatus(&ctx, {}, &s).ok()) continue;
    loads[i] = {s.engine_ready(), s.waiting(), s.running(), s.max_seq_len()};
  }
  std::lock_guard<std::mutex> lock(mu_);
  loads_ = std::move(loads);
}

CellRouter::Route CellRouter::Pick(absl::Span<const int32_t> prompt) {
  std::lock_guard<std::mutex> lock(mu_);
  const RouteDecision d =
      PickCell(loads_, targets_, PrefixKey(prompt), turn_.fetch_add(1));
  Route r;
  r.cell = d.cell < 0 ? 0 : d.cell;
  r.reason = d.reason;
  r.stub = stubs_[r.cell].get();
  ++routed_[r.cell];
  // A routed request is waiting there until the next poll says otherwise,
  // so a burst between polls spreads instead of piling onto one cell.
  if (d.cell >= 0 && d.reason != RouteReason::kPrefix) ++loads_[r.cell].waiting;
  return r;
}

std::vector<CellLoad> CellRouter::Loads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return loads_;
}

void CellRouter::SetLoads(std::vector<CellLoad> loads) {
  std::lock_guard<std::mutex> lock(mu_);
  loads.resize(targets_.size());
  loads_ = std::move(loads);
}

std::vector<int64_t> CellRouter::RoutedCounts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return routed_;
}

}  // namespace pdserve::frontend
