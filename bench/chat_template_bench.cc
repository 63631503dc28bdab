// Chat template harness: parses a template once, renders a conversation
// many times, prints JSON timings. Driven by bench/chat_compare.py.
//   chat_template_bench TEMPLATE_FILE MESSAGES_JSON ITERS
// MESSAGES_JSON: [{"role": ..., "content": ...}, ...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "nlohmann/json.hpp"
#include "server/chat/chat_template.h"

namespace {

std::string ReadFile(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double Seconds(std::chrono::steady_clock::time_point a,
               std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s TEMPLATE MESSAGES_JSON ITERS\n", argv[0]);
    return 2;
  }
  std::string source = ReadFile(argv[1]);
  nlohmann::json doc = nlohmann::json::parse(ReadFile(argv[2]), nullptr,
                                             /*allow_exceptions=*/false);
  int iters = 0;
  if (!absl::SimpleAtoi(argv[3], &iters) || iters < 1) {
    std::fprintf(stderr, "ITERS wants a positive integer, got '%s'\n", argv[3]);
    return 2;
  }
  std::vector<pdserve::ChatMessage> messages;
  for (const auto& m : doc) {
    if (!m.is_object() || !m.contains("role") || !m.contains("content") ||
        !m["role"].is_string() || !m["content"].is_string()) {
      break;
    }
    pdserve::ChatMessage cm;
    cm.role = m["role"].get<std::string>();
    cm.content = m["content"].get<std::string>();
    messages.push_back(cm);
  }
  if (!doc.is_array() || messages.size() != doc.size() || messages.empty()) {
    std::fprintf(stderr,
                 "%s: want a non-empty JSON array of {\"role\": string, "
                 "\"content\": string}\n",
                 argv[2]);
    return 2;
  }
  auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<pdserve::ChatTemplate> t =
      pdserve::ChatTemplate::Create(source, "", "<|im_end|>");
  auto t1 = std::chrono::steady_clock::now();
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", std::string(t.status().message()).c_str());
    return 1;
  }
  pdserve::ChatRenderOptions options;
  std::vector<double> times;
  std::string out;
  for (int i = 0; i < iters; ++i) {
    auto a = std::chrono::steady_clock::now();
    absl::StatusOr<std::string> r = t->Render(messages, options);
    auto b = std::chrono::steady_clock::now();
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", std::string(r.status().message()).c_str());
      return 1;
    }
    out = *std::move(r);
    times.push_back(Seconds(a, b));
  }
  std::sort(times.begin(), times.end());
  nlohmann::json result = {
      {"parse_us", Seconds(t0, t1) * 1e6},
      {"render_us_median", times[times.size() / 2] * 1e6},
      {"render_us_best", times.front() * 1e6},
      {"output_bytes", out.size()},
      {"output_hash", std::hash<std::string>()(out)},
      {"messages", messages.size()},
      {"iters", iters},
  };
  std::printf("%s\n", result.dump().c_str());
  // The rendered prompt goes to stderr's companion file for the comparison.
  if (const char* dump = std::getenv("CHAT_BENCH_DUMP")) {
    std::ofstream(dump, std::ios::binary) << out;
  }
  return 0;
}
