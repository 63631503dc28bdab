// The typed options of each pdserve process and their flag tables (the
// configuration door, flag_table.h). The tables in process_flags.cc are the
// one place each default is written: config/pdserve.json and the generated
// help are checked against them by tests/config/config_test.cc, and the
// library structs that carry the same knobs (EngineOptions, PolicyConfig)
// are held to them there too. Fields without a table default are optional or
// empty, meaning "not given" (each says what that means).
// Plain value types; the tables are immutable after first use (thread-safe).
#ifndef PDSERVE_CONFIG_PROCESS_OPTIONS_H_
#define PDSERVE_CONFIG_PROCESS_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "config/flag_table.h"

namespace pdserve::config {

// The /metrics endpoint of one process (every serving process has it).
struct MetricsOptions {
  std::optional<int64_t> port;  // --metrics-port; none = no /metrics
  std::string host;             // --metrics-host; empty = the process's --host
  bool vllm_compat = false;     // --vllm-metrics
  double peak_memory_bandwidth = 0;  // engine: bytes/s; 0 = measure
};

// `pdserve engine`.
struct EngineProcessOptions {
  std::string model;  // --model (required)
  std::string host;
  int64_t port = 0;
  int64_t threads = 0;    // 0 = every core
  std::string device;     // cpu, cuda, cuda:N
  std::string kv_memory;  // fraction of free memory or bytes (512M, 2G)
  int64_t page_size = 0;
  // --kv-dtype f32|f16|bf16|q8_0; empty = bf16 (a device takes bf16 or f32).
  std::string kv_dtype;
  int64_t max_sequences = 0;
  int64_t max_step_tokens = 0;
  // The capacity of one sequence in tokens (prompt + generated): 0 = the
  // model's context length, capped by the pool (engine/core/capacity.h).
  int64_t max_seq_len = 0;
  bool prefix_cache = false;  // on unless --no-prefix-cache
  bool shm_handoff = false;   // on unless --no-shm-handoff
  bool kv_huge_pages = false;  // --kv-huge-pages
  std::string name;          // empty = the model file's own name
  // The tokenizer constrained decoding matches (empty = --model).
  std::string tokenizer;
  int64_t grammar_compile_timeout_ms = 0;  // longest a constraint compiles
  // Vision-language models: a llama.cpp mmproj GGUF with the vision tower of
  // a GGUF --model (empty = none; safetensors models carry theirs), the
  // largest image in pixels it decodes, and the encoder-output cache's
  // byte budget.
  std::string mmproj;
  int64_t max_image_pixels = 0;
  int64_t image_cache_bytes = 0;
  MetricsOptions metrics;
};

// `pdserve scheduler`.
struct SchedulerProcessOptions {
  std::string engine;  // host:port
  std::string host;
  int64_t port = 0;
  int64_t budget = 0;
  int64_t chunk = 0;  // 0 = chunking off
  int64_t max_running = 0;
  int64_t max_queue = 0;
  double itl_slowdown = 0;  // 0 = fixed budget
  double itl_floor_ms = 0;  // with itl_slowdown: steps may always take this
  double step_timeout_s = 0;
  double engine_recovery_s = 0;  // 0 = a lost engine fails its requests
  int64_t pipeline_depth = 0;
  std::string step_log;  // empty = none
  std::string name;      // empty = "pdserve"
  std::string role;      // both | prefill | decode
  std::string engine_advertise;  // empty = --engine
  MetricsOptions metrics;
};

// `pdserve frontend`.
struct FrontendProcessOptions {
  std::string model;      // its tokenizer and chat template are used
  std::string tokenizer;  // empty = --model
  std::string scheduler;  // host:port
  std::string host;
  int64_t port = 0;
  std::string served_model_name;  // empty = --name, else the model's stem
  std::string name;               // older spelling of served-model-name
  int64_t http_port = 0;          // 0 = no HTTP API
  int64_t http_threads = 0;
  int64_t http_max_body = 0;
  std::string api_key;       // comma-separated; empty = none required
  std::string api_key_file;  // one key a line; empty = none
  int64_t drain_seconds = 0;
  double scheduler_recovery_s = 0;  // 0 = a broken call fails its stream
  std::string tool_call_parser;   // empty = from the chat template
  std::string reasoning_parser;   // empty = from the chat template
  int64_t grammar_compile_timeout_ms = 0;  // longest a constraint compiles
  // Prompts of at least this many tokens are prefilled on a prefill cell
  // and decoded on another (when both kinds are ready).
  int64_t pd_min_prompt_tokens = 0;
  // Images (vision-language models): the mmproj GGUF of a GGUF --model (its
  // preprocessing sizes), and the limits on one image's bytes and pixels
  // and on the images of one request.
  std::string mmproj;
  int64_t max_image_bytes = 0;
  int64_t max_image_pixels = 0;
  int64_t max_images = 0;
  MetricsOptions metrics;
};

// `pdserve serve`: its own rows plus the three tables composed (a flag of
// several children, such as --name, goes to each of them).
struct ServeOptions {
  std::string model;
  std::string host;
  int64_t port = 0;
  int64_t engine_port = 0;     // 0 = a free loopback port
  int64_t scheduler_port = 0;  // 0 = a free loopback port (cell 0's)
  int64_t cells = 1;  // scheduler + engine pairs behind the front end
  int64_t prefill_cells = 0;  // of them, --role prefill (the rest decode)
  std::optional<int64_t> metrics_port;  // first of three; none = free ports
  EngineProcessOptions engine;
  SchedulerProcessOptions scheduler;
  FrontendProcessOptions frontend;
};

const FlagTable<EngineProcessOptions>& EngineFlagTable();
const FlagTable<SchedulerProcessOptions>& SchedulerFlagTable();
const FlagTable<FrontendProcessOptions>& FrontendFlagTable();
const FlagTable<ServeOptions>& ServeFlagTable();

// Rows of serve's table that are its own (not forwarded to a child).
bool IsServeOwnFlag(const std::string& name);

}  // namespace pdserve::config

#endif  // PDSERVE_CONFIG_PROCESS_OPTIONS_H_
