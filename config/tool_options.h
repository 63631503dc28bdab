// The typed options of pdserve's local tools (`chat`, `simulate`) and their
// flag tables: the same configuration door as the serving processes
// (flag_table.h: default < config file section "chat"/"simulate" < env
// PDSERVE_CHAT_* / PDSERVE_SIMULATE_* < flag), so every subcommand parses,
// types, range-checks and documents its flags one way.
// Plain value types; the tables are immutable after first use (thread-safe).
#ifndef PDSERVE_CONFIG_TOOL_OPTIONS_H_
#define PDSERVE_CONFIG_TOOL_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "config/flag_table.h"

namespace pdserve::config {

// `pdserve chat [options] [MESSAGE]`. Sampling fields left at 0 are the
// server's defaults (greedy); ranges that depend on the model are checked by
// the server, the 32-bit wire limits here.
struct ChatOptions {
  std::string target;  // front end host:port
  int64_t max_tokens = 0;  // 0 = the rest of the capacity
  double temperature = 0;
  double top_p = 0;
  int64_t top_k = 0;
  std::optional<int64_t> seed;  // none = unseeded; negative wraps to uint64
  std::string system;           // empty = no system message
  std::string stop;             // empty = none
  bool raw = false;             // MESSAGE is a raw prompt (no template)
  bool stats = false;           // finish reason, usage, timings on stderr
  double connect_timeout_s = 20;  // wait this long for the front end
};

// `pdserve simulate --trace FILE [options]`: the policy, pool and step-cost
// model of a replay. Cost fields without a value keep the default cost
// model or, with --calibration, the fitted one.
struct SimulateOptions {
  std::string trace;        // required
  std::string calibration;  // empty = none
  int64_t budget = 0;       // per-step token budget
  int64_t chunk = 0;        // prefill chunk, 0 = chunking off
  int64_t max_running = 0;
  int64_t max_queue = 0;
  int64_t page_size = 0;    // tokens
  int64_t pages = 0;
  int64_t max_seq_len = 0;  // tokens
  std::optional<double> fixed_ms;
  std::optional<double> prefill_token_ms;
  std::optional<double> decode_seq_ms;
  std::optional<double> attention_ms;
  double itl_slowdown = 0;  // 0 = fixed budget
  double itl_floor_ms = 0;  // with itl_slowdown: steps may always take this
  bool json = false;
  // The cluster: cells, of them prefill cells (0 = none), the split
  // threshold and the hand-off cost, how requests are routed.
  int64_t cells = 1;
  int64_t prefill_cells = 0;
  int64_t pd_min_prompt_tokens = 0;  // tokens
  double handoff_fixed_ms = 0;
  double handoff_ms_per_token = 0;
  std::string router;      // "cache" | "prefix" | "round-robin"
  std::string budget_fit;  // "online" | "given"
  bool prefix_cache = true;
  double slo_ttft_ms = 0;  // 0 = not constrained
  double slo_itl_ms = 0;
  int64_t sizing = 0;      // > 0: the sizing table up to this many cells
  bool step_noise = false;  // replay the calibration's step-time spread
};

const FlagTable<ChatOptions>& ChatFlagTable();
const FlagTable<SimulateOptions>& SimulateFlagTable();

}  // namespace pdserve::config

#endif  // PDSERVE_CONFIG_TOOL_OPTIONS_H_
