// Helpers for the MoE / hybrid golden tests: fixture IO and a multi-sequence
// runner over one ForwardPass (each sequence owns a disjoint page range).
#ifndef PDSERVE_TESTS_ENGINE_HYBRID_TEST_UTIL_H_
#define PDSERVE_TESTS_ENGINE_HYBRID_TEST_UTIL_H_

#include <cmath>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "engine/model/forward.h"
#include "gtest/gtest.h"
#include "kernels/thread_pool.h"
#include "nlohmann/json.hpp"

namespace pdserve::hybrid_test {

inline const std::string kHybridDir =
    std::string(PDSERVE_TESTDATA_DIR) + "/hybrid";

inline nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

inline std::vector<float> ReadF32(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  EXPECT_TRUE(in.good()) << path;
  const auto bytes = static_cast<size_t>(in.tellg());
  std::vector<float> out(bytes / 4);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(out.data()), bytes);
  return out;
}

inline int32_t Argmax(const float* x, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

// Up to kSeqs sequences of up to kPagesPerSeq * kPage positions each.
class MultiRunner {
 public:
  static constexpr int64_t kPage = 16;
  static constexpr int64_t kPagesPerSeq = 8;
  static constexpr int64_t kSeqs = 8;

  explicit MultiRunner(const ModelWeights& w, int64_t max_tokens = 64,
                       KvDType dtype = KvDType::kF32)
      : w_(w),
        kv_(w.config.num_kv_layers(), w.config.kv_dim(), kPage,
            kPagesPerSeq * kSeqs, dtype, w.config.head_dim),
        pool_(2),
        pos_(kSeqs, 0) {
    for (int64_t s = 0; s < kSeqs; ++s) {
      // Garbage, not zeros: Run must reset the state of a new sequence.
      states_.emplace_back(w.config.linear_state_floats(), 7.0f);
      pages_.emplace_back(kPagesPerSeq);
      std::iota(pages_.back().begin(), pages_.back().end(),
                static_cast<int32_t>(s * kPagesPerSeq));
    }
    auto fp = ForwardPass::Create(w, kv_, pool_, max_tokens);
    EXPECT_TRUE(fp.ok()) << fp.status();
    fp_ = std::move(*fp);
  }

  // One step: tokens[i] fed to sequence seqs[i]. Returns, per entry, all
  // rows (all == true) or the last row of logits.
  std::vector<std::vector<float>> Step(
      const std::vector<int>& seqs,
      const std::vector<std::vector<int32_t>>& tokens, bool all,
      ForwardStats* stats = nullptr) {
    std::vector<SequenceSpan> spans;
    for (size_t i = 0; i < seqs.size(); ++i) {
      spans.push_back(
          SequenceSpan{tokens[i], pos_[seqs[i]], pages_[seqs[i]], 0, all});
      if (!states_[seqs[i]].empty()) {
        spans.back().linear_state = states_[seqs[i]].data();
      }
    }
    std::vector<float> logits(ForwardPass::LogitRows(spans) *
                              w_.config.vocab_size);
    absl::Status s = fp_->Run(spans, absl::MakeSpan(logits), stats);
    EXPECT_TRUE(s.ok()) << s;
    std::vector<std::vector<float>> out;
    const float* p = logits.data();
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int64_t n = spans[i].logit_rows() * w_.config.vocab_size;
      out.emplace_back(p, p + n);
      p += n;
      pos_[seqs[i]] += static_cast<int64_t>(tokens[i].size());
    }
    return out;
  }
  std::vector<float> Feed(const std::vector<int32_t>& tokens, bool all,
                          ForwardStats* stats = nullptr) {
    return Step({0}, {tokens}, all, stats)[0];
  }

 private:
  const ModelWeights& w_;
  KvStorage kv_;
  ThreadPool pool_;
  std::vector<std::vector<int32_t>> pages_;
  std::vector<std::vector<float>> states_;  // linear-attention state
  std::vector<int64_t> pos_;
  std::unique_ptr<ForwardPass> fp_;
};

// Prefill (all rows) + greedy decode against the fixture, within `tol`.
inline void CheckGolden(const ModelWeights& w, const std::string& dir,
                        float tol) {
  const nlohmann::json meta = ReadJson(dir + "/expected.json");
  const std::vector<float> expected = ReadF32(dir + "/expected_logits.f32");
  const int64_t vocab = meta["vocab_size"];
  ASSERT_EQ(w.config.vocab_size, vocab);
  const auto prompt = meta["prompt_ids"].get<std::vector<int32_t>>();
  const auto decode = meta["decode_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(expected.size(), (prompt.size() + decode.size()) * vocab);
  MultiRunner run(w);
  std::vector<float> got = run.Feed(prompt, /*all=*/true);
  float max_diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(got[i] - expected[i]));
    ASSERT_NEAR(got[i], expected[i], tol)
        << "prefill row " << i / vocab << " logit " << i % vocab;
  }
  std::vector<float> last(got.end() - vocab, got.end());
  for (size_t k = 0; k < decode.size(); ++k) {
    ASSERT_EQ(Argmax(last.data(), vocab), decode[k]) << "decode step " << k;
    last = run.Feed({decode[k]}, false);
    const float* want = expected.data() + (prompt.size() + k) * vocab;
    for (int64_t i = 0; i < vocab; ++i) {
      max_diff = std::max(max_diff, std::fabs(last[i] - want[i]));
      ASSERT_NEAR(last[i], want[i], tol)
          << "decode step " << k << " logit " << i;
    }
  }
  std::printf("%s: largest logit difference %.3g over %zu rows\n", dir.c_str(),
              max_diff, prompt.size() + decode.size());
}

// The golden with a 16-bit KV cache (`dtype`): the greedy token of every
// row (prefill rows and decode steps) equals the fixture's; the largest
// logit difference is printed, recorded (RecordProperty) and below `bound`.
inline void CheckGoldenGreedy(const ModelWeights& w, const std::string& dir,
                              KvDType dtype, float bound) {
  const nlohmann::json meta = ReadJson(dir + "/expected.json");
  const std::vector<float> expected = ReadF32(dir + "/expected_logits.f32");
  const int64_t vocab = meta["vocab_size"];
  const auto prompt = meta["prompt_ids"].get<std::vector<int32_t>>();
  const auto decode = meta["decode_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(expected.size(), (prompt.size() + decode.size()) * vocab);
  MultiRunner run(w, 64, dtype);
  std::vector<float> got = run.Feed(prompt, /*all=*/true);
  for (size_t k = 0; k < decode.size(); ++k) {
    std::vector<float> last = run.Feed({decode[k]}, false);
    got.insert(got.end(), last.begin(), last.end());
  }
  float max_diff = 0;
  for (size_t r = 0; r < prompt.size() + decode.size(); ++r) {
    EXPECT_EQ(Argmax(got.data() + r * vocab, vocab),
              Argmax(expected.data() + r * vocab, vocab))
        << "row " << r;
    if (r + 1 >= prompt.size() && r + 1 - prompt.size() < decode.size()) {
      EXPECT_EQ(Argmax(got.data() + r * vocab, vocab),
                decode[r + 1 - prompt.size()])
          << "decode step " << r + 1 - prompt.size();
    }
    for (int64_t i = 0; i < vocab; ++i) {
      max_diff = std::max(max_diff, std::fabs(got[r * vocab + i] -
                                              expected[r * vocab + i]));
    }
  }
  std::printf("%s, --kv-dtype %s: greedy tokens equal; largest logit "
              "difference %.3g\n",
              dir.c_str(), KvDTypeName(dtype), max_diff);
  ::testing::Test::RecordProperty(
      std::string("max_logit_diff_") + KvDTypeName(dtype),
      std::to_string(max_diff));
  EXPECT_LT(max_diff, bound) << KvDTypeName(dtype);
}

// Prefill in chunks of `chunk` tokens (all rows) must equal one-shot.
inline void CheckChunked(const ModelWeights& w,
                         const std::vector<int32_t>& prompt, int64_t chunk,
                         float tol) {
  MultiRunner whole(w), parts(w);
  const std::vector<float> want = whole.Feed(prompt, true);
  std::vector<float> got;
  for (size_t b = 0; b < prompt.size(); b += chunk) {
    const size_t e = std::min(prompt.size(), b + chunk);
    std::vector<int32_t> piece(prompt.begin() + b, prompt.begin() + e);
    std::vector<float> rows = parts.Feed(piece, true);
    got.insert(got.end(), rows.begin(), rows.end());
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol)
        << "chunk " << chunk << ": row " << i / w.config.vocab_size;
  }
}

// Sequences with different prompts, prefilled in different steps so they
// sit at different positions, then decoded greedily together: each gets the
// tokens it gets alone.
inline void CheckBatchedGreedy(const ModelWeights& w,
                               const std::vector<std::vector<int32_t>>& prompts,
                               int steps) {
  const int64_t vocab = w.config.vocab_size;
  std::vector<std::vector<int32_t>> alone(prompts.size());
  for (size_t s = 0; s < prompts.size(); ++s) {
    MultiRunner run(w);
    std::vector<float> last = run.Feed(prompts[s], false);
    for (int k = 0; k < steps; ++k) {
      alone[s].push_back(Argmax(last.data(), vocab));
      last = run.Feed({alone[s].back()}, false);
    }
  }
  MultiRunner run(w);
  std::vector<std::vector<int32_t>> together(prompts.size());
  std::vector<int32_t> next(prompts.size());
  // Sequence s joins at step s (its prefill mixed with the others' decodes).
  for (int k = 0; k < steps + static_cast<int>(prompts.size()); ++k) {
    std::vector<int> seqs;
    std::vector<std::vector<int32_t>> toks;
    for (size_t s = 0; s < prompts.size(); ++s) {
      if (static_cast<int>(s) == k) {
        seqs.push_back(static_cast<int>(s));
        toks.push_back(prompts[s]);
      } else if (static_cast<int>(s) < k &&
                 together[s].size() < static_cast<size_t>(steps)) {
        seqs.push_back(static_cast<int>(s));
        toks.push_back({next[s]});
      }
    }
    if (seqs.empty()) break;
    std::vector<std::vector<float>> out = run.Step(seqs, toks, false);
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int s = seqs[i];
      next[s] = Argmax(out[i].data(), vocab);
      together[s].push_back(next[s]);
    }
  }
  for (size_t s = 0; s < prompts.size(); ++s) {
    together[s].resize(steps);
    EXPECT_EQ(together[s], alone[s]) << "sequence " << s;
  }
}

}  // namespace pdserve::hybrid_test

#endif  // PDSERVE_TESTS_ENGINE_HYBRID_TEST_UTIL_H_
