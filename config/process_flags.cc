// The flag tables of the pdserve processes: each default is written here
// once (config/pdserve.json and the help text are checked against it).
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "config/flag_rows.h"
#include "config/process_options.h"

namespace pdserve::config {
namespace {

using rows::Bool;
using rows::Int;
using rows::kNoMax;
using rows::OutOfRange;
using rows::Real;
using rows::Str;

Flag<MetricsOptions> MetricsPortFlag() {
  return {{"metrics-port", FlagType::kInt, "",
           "/metrics port of this process (0 = any free port; none when "
           "absent)"},
          [](const FlagValue& v, MetricsOptions* o) {
            if (v.i < 0 || v.i > 65535) {
              return OutOfRange("metrics-port", v, 0, 65535);
            }
            o->port = v.i;
            return absl::OkStatus();
          }};
}

// Lifts a row of table T into options O through a member (O::*part is a T).
template <typename O, typename T>
Flag<O> Lift(const Flag<T>& f, T O::*part) {
  auto set = f.set;
  return {f.info,
          [set, part](const FlagValue& v, O* o) { return set(v, &(o->*part)); }};
}

// The /metrics rows shared by engine, scheduler and frontend.
template <typename O>
void AppendMetricsFlags(std::vector<Flag<O>>& rows, bool engine) {
  std::vector<Flag<MetricsOptions>> m = {
      MetricsPortFlag(),
      Str("metrics-host", "", "interface for /metrics (default: --host)",
          &MetricsOptions::host),
      Bool("vllm-metrics",
           "also export vllm:num_requests_waiting/running and "
           "vllm:kv_cache_usage_perc",
           &MetricsOptions::vllm_compat),
  };
  if (engine) {
    m.push_back(Real("peak-memory-bandwidth", "0",
                     "device peak memory bandwidth in bytes/s for the "
                     "utilisation ratio (0 = measure with a copy probe at "
                     "start)",
                     &MetricsOptions::peak_memory_bandwidth, 0, true));
  }
  for (const auto& f : m) rows.push_back(Lift(f, &O::metrics));
}

FlagTable<EngineProcessOptions> MakeEngineFlags() {
  using O = EngineProcessOptions;
  FlagTable<O> t{"engine", {}};
  t.flags = {
      Str("model", "", "model file or folder (GGUF, safetensors, llama2.c .bin)",
          &O::model),
      Str("host", "127.0.0.1", "interface to listen on", &O::host),
      Int("port", "50053", "gRPC port (0 = any free port)", &O::port, 0, 65535),
      Int("threads", "0", "compute threads (0 = every core)", &O::threads),
      Str("device", "cpu",
          "where the model runs: cpu, cuda or cuda:N (loads libpdserve_cuda.so)",
          &O::device),
      Str("kv-memory", "0.5",
          "KV pool budget: a fraction of free memory (0.5) or bytes with a "
          "K/M/G suffix",
          &O::kv_memory),
      Int("page-size", "16", "tokens per KV page", &O::page_size, 1),
      Str("kv-dtype", "",
          "KV cache storage: f32, f16, bf16 or q8_0 (default bf16; a device "
          "takes bf16 or f32)",
          &O::kv_dtype),
      Int("max-sequences", "256", "sequences live at once", &O::max_sequences,
          1),
      Int("max-step-tokens", "2048", "most tokens one step processes",
          &O::max_step_tokens, 1),
      Int("max-seq-len", "0",
          "capacity of one sequence in tokens, prompt + generated: the one "
          "capacity every process enforces (0 = the model's context length, "
          "capped by the KV pool)",
          &O::max_seq_len, 0),
      Bool("no-prefix-cache",
           "turn off automatic prefix caching (on by default for dense models "
           "on the CPU: prompts reuse the KV pages of a prefix already "
           "computed)",
           &O::prefix_cache, /*invert=*/true),
      Bool("kv-huge-pages",
           "back the host KV cache with transparent huge pages: attention "
           "over long contexts runs faster, but memory "
           "becomes resident, and is returned, in 2 MiB steps rather than "
           "page by page",
           &O::kv_huge_pages),
      Bool("no-shm-handoff",
           "send KV hand-offs to a decode engine on this host over gRPC too "
           "(by default they go through shared memory, /dev/shm)",
           &O::shm_handoff, /*invert=*/true),
      Str("name", "", "model name to report (default: from the file)",
          &O::name),
      Str("tokenizer", "",
          "tokenizer constrained decoding matches against (GGUF, "
          "tokenizer.json or its folder; default: the model)",
          &O::tokenizer),
      Int("grammar-compile-timeout-ms", "10000",
          "longest a response format, tool-call grammar or other constraint "
          "may take to compile",
          &O::grammar_compile_timeout_ms, 1),
      Str("mmproj", "",
          "llama.cpp mmproj GGUF with the vision tower of a GGUF --model "
          "(Qwen3.5: projector qwen3vl_merger)",
          &O::mmproj),
      Int("max-image-pixels", "16777216",
          "largest image, in pixels, a request may send (decoded size)",
          &O::max_image_pixels, 1),
      Int("image-cache-bytes", "268435456",
          "vision-encoder outputs kept by image content, so a repeated image "
          "is not encoded again (0 = none)",
          &O::image_cache_bytes, 0),
  };
  AppendMetricsFlags(t.flags, /*engine=*/true);
  return t;
}

FlagTable<SchedulerProcessOptions> MakeSchedulerFlags() {
  using O = SchedulerProcessOptions;
  FlagTable<O> t{"scheduler", {}};
  t.flags = {
      Str("engine", "127.0.0.1:50053", "engine address", &O::engine),
      Str("host", "127.0.0.1", "interface to listen on", &O::host),
      Int("port", "50052", "gRPC port (0 = any free port)", &O::port, 0, 65535),
      Int("budget", "512", "tokens per step, decode + prefill", &O::budget, 1),
      Int("chunk", "256", "prefill chunk per sequence and step; 0 = chunking off",
          &O::chunk, 0),
      Int("max-running", "64", "most sequences running at once",
          &O::max_running, 1),
      Int("max-queue", "1024", "waiting queue bound", &O::max_queue, 1),
      Real("itl-slowdown", "1.5",
           "adapt the step budget so a step with prefill costs at most X times "
           "a decode-only step while sequences decode (fitted online; 0 = "
           "fixed budget)",
           &O::itl_slowdown, 0, true),
      Real("itl-floor-ms", "40",
           "with --itl-slowdown: a step may always take this long, however "
           "short a decode-only step is (few streams decoding do not starve "
           "a long prompt's prefill); 0 = the slowdown alone",
           &O::itl_floor_ms, 0, true),
      Real("step-timeout", "120",
           "seconds to wait for one step's result before treating the engine "
           "as hung",
           &O::step_timeout_s, 0, false),
      Real("engine-recovery-seconds", "30",
           "when the engine is lost, keep its requests this long waiting for "
           "it (or its restart) and resume each by recomputing prompt + "
           "tokens so far; 0 = end them UNAVAILABLE at once",
           &O::engine_recovery_s, 0, true),
      Int("pipeline-depth", "2",
          "steps written to the engine ahead of their results (2: the next "
          "step waits at the engine while one runs; 1 = none)",
          &O::pipeline_depth, 1),
      Str("step-log", "",
          "write prefill_tokens,decode_seqs,step_ms,attended_mpairs per step "
          "(for simulate "
          "--calibration)",
          &O::step_log),
      Str("name", "",
          "model name for the vllm:* gauges' model_name label (default: "
          "pdserve)",
          &O::name),
      Str("role", "both",
          "this cell's part in prefill/decode disaggregation: both, prefill "
          "(front ends send it the prompts they split off) or decode",
          &O::role),
      Str("engine-advertise", "",
          "the engine address other cells' engines fetch this cell's KV "
          "hand-offs from (default: --engine)",
          &O::engine_advertise),
  };
  AppendMetricsFlags(t.flags, /*engine=*/false);
  return t;
}

FlagTable<FrontendProcessOptions> MakeFrontendFlags() {
  using O = FrontendProcessOptions;
  FlagTable<O> t{"frontend", {}};
  t.flags = {
      Str("model", "", "model file (its vocabulary and chat template are used)",
          &O::model),
      Str("tokenizer", "",
          "tokenizer file when the model has none inside (llama2.c "
          "tokenizer.bin, tokenizer.json)",
          &O::tokenizer),
      Str("scheduler", "127.0.0.1:50052",
          "scheduler address, or a comma-separated list of cells (one "
          "scheduler each; dns:///NAME:PORT = every address NAME resolves "
          "to, re-resolved every 5 s): requests are routed by prompt "
          "prefix, then load",
          &O::scheduler),
      Str("host", "127.0.0.1", "interface to listen on", &O::host),
      Int("port", "50051", "public gRPC port (0 = any free port)", &O::port, 0,
          65535),
      Str("served-model-name", "",
          "model name the APIs serve and check (default: the model file's "
          "stem)",
          &O::served_model_name),
      Str("name", "", "the same as --served-model-name (older name)", &O::name),
      Int("http-port", "8000",
          "OpenAI/Anthropic-compatible HTTP API port (0 = off)", &O::http_port,
          0, 65535),
      Int("http-threads", "2", "HTTP API IO threads", &O::http_threads, 1, 256),
      Int("http-max-body", "8388608",
          "largest HTTP request body in bytes; larger ones get 413",
          &O::http_max_body, 1),
      Str("api-key", "",
          "HTTP API keys, comma-separated (Authorization: Bearer KEY); "
          "default: none required",
          &O::api_key),
      Str("api-key-file", "", "file of HTTP API keys, one a line",
          &O::api_key_file),
      Int("drain-seconds", "30", "on SIGTERM, how long open streams may finish",
          &O::drain_seconds, 0),
      Real("scheduler-recovery-seconds", "30",
           "when a stream's scheduler call breaks (the scheduler died), keep "
           "resubmitting it with the tokens so far this long; 0 = end it "
           "UNAVAILABLE at once",
           &O::scheduler_recovery_s, 0, true),
      Str("tool-call-parser", "",
          "tool-call format of the model's replies: hermes, qwen3_coder, "
          "llama3_json or none (default: from the chat template)",
          &O::tool_call_parser),
      Str("reasoning-parser", "",
          "reasoning format of the model's replies: think (<think>...</think>) "
          "or none (default: from the chat template)",
          &O::reasoning_parser),
      Int("grammar-compile-timeout-ms", "10000",
          "longest a response format, tool-call grammar or other constraint "
          "may take to compile",
          &O::grammar_compile_timeout_ms, 1),
      Int("pd-min-prompt-tokens", "256",
          "with prefill cells (--role prefill) and decode cells ready: "
          "prompts of at least this many tokens are prefilled on a prefill "
          "cell, then decoded on another from its KV",
          &O::pd_min_prompt_tokens, 1),
      Str("mmproj", "",
          "llama.cpp mmproj GGUF with the vision tower of a GGUF --model "
          "(Qwen3.5: projector qwen3vl_merger)",
          &O::mmproj),
      Int("max-image-bytes", "8388608",
          "largest image file a request may send, in bytes",
          &O::max_image_bytes, 1),
      Int("max-image-pixels", "16777216",
          "largest image, in pixels, a request may send (decoded size)",
          &O::max_image_pixels, 1),
      Int("max-images", "4", "most images in one request", &O::max_images,
          0),
  };
  AppendMetricsFlags(t.flags, /*engine=*/false);
  return t;
}

// serve's own rows: the public address, the loopback ports of the children
// and their /metrics ports.
constexpr const char* kServeOwn[] = {"model",          "host",
                                     "port",           "engine-port",
                                     "scheduler-port", "metrics-port",
                                     "metrics-host",   "cells",
                                     "prefill-cells"};

// Adds the rows of `child` to `rows`, skipping serve's own; a name already
// there (a flag several children have) gets both setters.
template <typename T>
void Compose(std::vector<Flag<ServeOptions>>& rows, const FlagTable<T>& child,
             T ServeOptions::*part) {
  for (const Flag<T>& f : child.flags) {
    if (IsServeOwnFlag(f.info.name)) continue;
    Flag<ServeOptions> lifted = Lift(f, part);
    bool merged = false;
    for (Flag<ServeOptions>& row : rows) {
      if (row.info.name != f.info.name) continue;
      auto first = row.set, second = lifted.set;
      row.set = [first, second](const FlagValue& v, ServeOptions* o) {
        absl::Status s = first(v, o);
        return s.ok() ? second(v, o) : s;
      };
      merged = true;
    }
    if (!merged) rows.push_back(std::move(lifted));
  }
}

FlagTable<ServeOptions> MakeServeFlags() {
  using O = ServeOptions;
  FlagTable<O> t{"serve", {}};
  t.flags = {
      Str("model", "", "model file or folder", &O::model),
      Str("host", "127.0.0.1", "public interface", &O::host),
      Int("port", "50051", "public gRPC port", &O::port, 0, 65535),
      Int("engine-port", "0",
          "engine gRPC port on loopback (0 = a free one)", &O::engine_port, 0,
          65535),
      Int("scheduler-port", "0",
          "scheduler gRPC port on loopback (0 = a free one)",
          &O::scheduler_port, 0, 65535),
      Int("cells", "1",
          "cells (a scheduler and its engine each) behind the front end, "
          "which routes requests by prompt prefix, then load; the engines "
          "split --threads (or the cores) between them",
          &O::cells, 1, 64),
      Int("prefill-cells", "0",
          "of the cells, how many only prefill (--role prefill; the others "
          "--role decode): long prompts are prefilled there and their KV "
          "handed to a decode cell; 0 = every cell does both",
          &O::prefill_cells, 0, 63),
      {{"metrics-port", FlagType::kInt, "",
        "first of three /metrics ports: frontend, scheduler, engine (default: "
        "free ports)"},
       [](const FlagValue& v, O* o) {
         if (v.i < 0 || v.i > 65533) {
           return OutOfRange("metrics-port", v, 0, 65533);
         }
         o->metrics_port = v.i;
         return absl::OkStatus();
       }},
  };
  Compose(t.flags, EngineFlagTable(), &O::engine);
  Compose(t.flags, SchedulerFlagTable(), &O::scheduler);
  Compose(t.flags, FrontendFlagTable(), &O::frontend);
  return t;
}

}  // namespace

bool IsServeOwnFlag(const std::string& name) {
  for (const char* own : kServeOwn) {
    if (name == own) return true;
  }
  return false;
}

const FlagTable<EngineProcessOptions>& EngineFlagTable() {
  static const auto* table = new FlagTable<EngineProcessOptions>(MakeEngineFlags());
  return *table;
}

const FlagTable<SchedulerProcessOptions>& SchedulerFlagTable() {
  static const auto* table =
      new FlagTable<SchedulerProcessOptions>(MakeSchedulerFlags());
  return *table;
}

const FlagTable<FrontendProcessOptions>& FrontendFlagTable() {
  static const auto* table =
      new FlagTable<FrontendProcessOptions>(MakeFrontendFlags());
  return *table;
}

const FlagTable<ServeOptions>& ServeFlagTable() {
  static const auto* table = new FlagTable<ServeOptions>(MakeServeFlags());
  return *table;
}

}  // namespace pdserve::config
