// Tokenizer encode/decode throughput, one thread. Prints one JSON line.
//   tokenizer_bench --tokenizer PATH --corpus FILE [--iters N] [--ids-out FILE]
// FILE is a JSON array of documents; each is encoded separately (as a server
// encodes requests) and, separately, their concatenation in one call.
// bench/tokenizer_compare.py generates the corpus and runs this next to the
// PyPI `tokenizers` package, printing the ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "nlohmann/json.hpp"
#include "server/tokenizer/tokenizer.h"

namespace {

double Seconds(std::chrono::steady_clock::time_point a,
               std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path, corpus_path, ids_out;
  int iters = 5;
  pdserve::bench::BenchFlags(
      "tokenizer_bench --tokenizer PATH --corpus FILE [--iters N] "
      "[--ids-out FILE]")
      .String("tokenizer", &tokenizer_path)
      .String("corpus", &corpus_path)
      .Int("iters", &iters, 1)
      .String("ids-out", &ids_out)
      .Parse(argc, argv);
  if (tokenizer_path.empty() || corpus_path.empty()) {
    std::fprintf(stderr,
                 "usage: tokenizer_bench --tokenizer PATH --corpus FILE "
                 "[--iters N] [--ids-out FILE]\n");
    return 2;
  }
  std::ifstream in(corpus_path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  const auto docs_json = nlohmann::json::parse(ss.str(), nullptr, false);
  if (!docs_json.is_array()) {
    std::fprintf(stderr, "%s is not a JSON array of strings\n",
                 corpus_path.c_str());
    return 2;
  }
  std::vector<std::string> docs;
  std::string corpus;
  for (const auto& d : docs_json) {
    docs.push_back(d.get<std::string>());
    corpus += docs.back();
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto tok = pdserve::Tokenizer::Load(tokenizer_path);
  const auto t1 = std::chrono::steady_clock::now();
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  // Documents one by one; the first pass is cold (empty word cache).
  std::vector<double> cold, warm, whole, dec;
  std::vector<int32_t> ids;
  for (int i = 0; i < iters + 1; ++i) {
    ids.clear();
    const auto a = std::chrono::steady_clock::now();
    for (const std::string& d : docs) {
      auto r = (*tok)->Encode(d);
      if (!r.ok()) {
        std::fprintf(stderr, "%s\n", std::string(r.status().message()).c_str());
        return 1;
      }
      ids.insert(ids.end(), r->begin(), r->end());
    }
    (i == 0 ? cold : warm)
        .push_back(Seconds(a, std::chrono::steady_clock::now()));
  }
  for (int i = 0; i < iters; ++i) {
    const auto a = std::chrono::steady_clock::now();
    auto r = (*tok)->Encode(corpus);
    whole.push_back(Seconds(a, std::chrono::steady_clock::now()));
    if (!r.ok()) return 1;
  }
  std::string text;
  for (int i = 0; i < iters; ++i) {
    const auto a = std::chrono::steady_clock::now();
    text = (*tok)->Decode(ids);
    dec.push_back(Seconds(a, std::chrono::steady_clock::now()));
  }
  if (!ids_out.empty()) {
    std::ofstream out(ids_out);
    for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
    out << "\n";
  }
  const double mb = corpus.size() / 1e6;
  std::printf(
      "{\"impl\": \"pdserve\", \"bytes\": %zu, \"tokens\": %zu, "
      "\"docs\": %zu, \"load_s\": %.3f, \"encode_cold_mb_s\": %.2f, "
      "\"encode_mb_s\": %.2f, \"encode_whole_mb_s\": %.2f, "
      "\"decode_mb_s\": %.2f, \"roundtrip_ok\": %s}\n",
      corpus.size(), ids.size(), docs.size(), Seconds(t0, t1), mb / cold[0],
      mb / Median(warm), mb / Median(whole), mb / Median(dec),
      text == corpus ? "true" : "false");
  return 0;
}
