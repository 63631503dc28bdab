// The flag tables of the local tools; each default is written here once.
#include <limits>

#include "config/flag_rows.h"
#include "config/tool_options.h"

namespace pdserve::config {
namespace {

using rows::Bool;
using rows::Int;
using rows::OptionalReal;
using rows::Real;
using rows::Str;

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

FlagTable<ChatOptions> MakeChatFlags() {
  using O = ChatOptions;
  FlagTable<O> t{"chat", {}};
  t.flags = {
      Str("target", "127.0.0.1:50051", "front end address", &O::target),
      Int("max-tokens", "0",
          "most tokens per reply (0 = the rest of the capacity)",
          &O::max_tokens, 0, kInt32Max),
      Real("temperature", "0", "sampling temperature (0 = greedy)",
           &O::temperature, 0, true),
      Real("top-p", "0", "nucleus sampling mass (0 = off)", &O::top_p, 0, true),
      Int("top-k", "0", "top-k sampling (0 = off)", &O::top_k, 0, kInt32Max),
      {{"seed", FlagType::kInt, "", "sampling seed (default: unseeded)"},
       [](const FlagValue& v, O* o) {
         o->seed = v.i;
         return absl::OkStatus();
       }},
      Str("system", "", "system message", &O::system),
      Str("stop", "", "a stop string", &O::stop),
      Bool("raw", "send MESSAGE as a raw prompt (no chat template)", &O::raw),
      Bool("stats", "print finish reason, usage and timings on stderr",
           &O::stats),
      Real("connect-timeout", "20",
           "seconds to wait for the front end to accept the connection "
           "(retrying) before the first request",
           &O::connect_timeout_s, 0, false),
  };
  return t;
}

FlagTable<SimulateOptions> MakeSimulateFlags() {
  using O = SimulateOptions;
  FlagTable<O> t{"simulate", {}};
  t.flags = {
      Str("trace", "",
          "trace file: CSV arrival_s,prompt_tokens,output_tokens[,priority"
          "[,prefix_group,prefix_tokens]] or JSON with those keys",
          &O::trace),
      Int("budget", "512", "per-step token budget", &O::budget, 1),
      Int("chunk", "256", "prefill chunk size (0 = chunking off)", &O::chunk,
          0),
      Int("max-running", "64", "most sequences running at once",
          &O::max_running, 1),
      Int("max-queue", "1024", "waiting queue bound", &O::max_queue, 1),
      Int("page-size", "16", "KV page size in tokens", &O::page_size, 1),
      Int("pages", "8192", "KV pages in the pool", &O::pages, 1),
      Int("max-seq-len", "4096", "sequence capacity in tokens",
          &O::max_seq_len, 1),
      OptionalReal("fixed-ms",
                   "step cost: fixed milliseconds (default 2, or the fit)",
                   &O::fixed_ms, 0),
      OptionalReal("prefill-token-ms",
                   "step cost: ms per prefill token (default 0.05, or the "
                   "fit)",
                   &O::prefill_token_ms, 0),
      OptionalReal("decode-seq-ms",
                   "step cost: ms per decoding sequence (default 0.5, or the "
                   "fit)",
                   &O::decode_seq_ms, 0),
      OptionalReal("attention-ms",
                   "step cost: ms per million attended (token, position) "
                   "pairs (default 0, or the fit)",
                   &O::attention_ms, 0),
      Real("itl-slowdown", "1.5",
           "adaptive budget as in serve: a step with prefill costs at most X "
           "times a decode-only step (0 = fixed budget)",
           &O::itl_slowdown, 0, true),
      Real("itl-floor-ms", "40",
           "as in serve: with --itl-slowdown a step may always take this "
           "long (ms); 0 = the slowdown alone",
           &O::itl_floor_ms, 0, true),
      Str("calibration", "",
          "CSV prefill_tokens,decode_seqs,step_ms[,attended_mpairs] of measured "
          "engine steps "
          "(scheduler --step-log; several files comma-separated): fits the "
          "cost model",
          &O::calibration),
      Bool("json", "print the result as JSON", &O::json),
      Int("cells", "1", "cells (scheduler + engine) behind the front end",
          &O::cells, 1, 4096),
      Int("prefill-cells", "0",
          "of the cells, this many prefill the prompts the front end splits "
          "off (< --cells)",
          &O::prefill_cells, 0, 4095),
      Int("pd-min-prompt-tokens", "256",
          "prompts of at least this many tokens are split onto a prefill "
          "cell",
          &O::pd_min_prompt_tokens, 1),
      Real("handoff-fixed-ms", "2",
           "KV hand-off cost: fixed milliseconds per hand-off",
           &O::handoff_fixed_ms, 0, true),
      Real("handoff-ms-per-token", "0.01",
           "KV hand-off cost: milliseconds per prompt token moved",
           &O::handoff_ms_per_token, 0, true),
      Str("router", "cache",
          "how the front end picks cells: cache (as it does: the cell it "
          "sent most of the prompt's leading pages to, then prefix "
          "affinity, bounded load, least loaded), prefix (without the "
          "first rule) or round-robin",
          &O::router),
      Str("budget-fit", "online",
          "the adaptive budget's cost model: online (fitted to each cell's "
          "own steps as the scheduler does) or given (the cost model from "
          "the first step)",
          &O::budget_fit),
      Bool("no-prefix-cache", "cells keep no prompt prefixes to share",
           &O::prefix_cache, /*invert=*/true),
      Real("slo-ttft-ms", "0",
           "latency objective: time to first token (0 = none)",
           &O::slo_ttft_ms, 0, true),
      Real("slo-itl-ms", "0",
           "latency objective: a request's mean inter-token gap (0 = none)",
           &O::slo_itl_ms, 0, true),
      Bool("step-noise",
           "scale each simulated step by a ratio drawn from the calibration "
           "steps' measured/fitted times (seeded), so tail latencies include "
           "the measured jitter; needs --calibration",
           &O::step_noise),
      Int("sizing", "0",
          "also print a sizing table for 1, 2, 4, ... up to this many cells "
          "(keeping the prefill share)",
          &O::sizing, 0, 4096),
  };
  return t;
}

}  // namespace

const FlagTable<ChatOptions>& ChatFlagTable() {
  static const auto* table = new FlagTable<ChatOptions>(MakeChatFlags());
  return *table;
}

const FlagTable<SimulateOptions>& SimulateFlagTable() {
  static const auto* table =
      new FlagTable<SimulateOptions>(MakeSimulateFlags());
  return *table;
}

}  // namespace pdserve::config
