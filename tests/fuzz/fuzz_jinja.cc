// libFuzzer target: the Jinja interpreter. The input is a template source;
// it is parsed and, when it parses, rendered with a chat's variables
// (messages, tools, add_generation_prompt, bos/eos) under tight limits.
// Any input must give a Status (or text), never a crash, a hang, unbounded
// memory or a leak.
#include <cstddef>
#include <cstdint>
#include "absl/strings/string_view.h"

#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "server/chat/jinja/template.h"
#include "server/chat/jinja/value.h"

namespace {

const pdserve::jinja::ValueDict& Variables() {
  static const pdserve::jinja::ValueDict* vars = [] {
    const auto json = nlohmann::ordered_json::parse(R"({
      "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4", "tool_calls": [
          {"type": "function", "function": {"name": "add",
           "arguments": {"a": 2, "b": 2}}}]},
        {"role": "tool", "content": "{\"sum\": 4}"}],
      "tools": [{"type": "function", "function": {"name": "add",
        "parameters": {"type": "object", "properties": {
          "a": {"type": "integer"}, "b": {"type": "integer"}}}}}],
      "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
      "enable_thinking": false})");
    auto* d = new pdserve::jinja::ValueDict();
    for (auto it = json.begin(); it != json.end(); ++it) {
      auto v = pdserve::jinja::Value::FromJson(it.value());
      if (v.ok()) d->Set(it.key(), *std::move(v));
    }
    return d;
  }();
  return *vars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto t = pdserve::jinja::Template::Parse(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!t.ok()) return 0;
  pdserve::jinja::RenderOptions options;
  options.limits.max_output_bytes = 1 << 20;
  options.limits.max_loop_iterations = 100000;
  options.limits.max_call_depth = 32;
  options.now = absl::FromUnixSeconds(1767225600);
  (void)t->Render(Variables(), options);
  return 0;
}
