// Guided decoding in the engine step (engine/core/sequence_guide.h): the
// grammar mask applied in the sampler of every constrained sequence of a
// batched step (mixed with free ones), many seeds, always giving output
// inside the grammar; the masked sampler's own contract; the reasoning
// budget forcing the end marker.
#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/core/engine_core.h"
#include "engine/core/sequence_guide.h"
#include "engine/model/sampler.h"
#include "gtest/gtest.h"
#include "kernels/thread_pool.h"
#include "nlohmann/json.hpp"
#include "tests/engine/engine_core_test_util.h"

namespace pdserve {
namespace {

// The tiny model's 97 ids as one character each: 0 and 1 special, 2 the
// end of text, 3..96 the printable ASCII characters ' '..'}'.
grammar::GrammarVocabulary TinyVocab() {
  grammar::GrammarVocabulary v;
  v.token_bytes.resize(97);
  for (int id = 3; id < 97; ++id) v.token_bytes[id] = std::string(1, ' ' + (id - 3));
  v.stop_ids = {2};
  return v;
}

std::string Text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    if (id >= 3) s += static_cast<char>(' ' + (id - 3));
  }
  return s;
}

std::unique_ptr<EngineCore> Core(ThreadPool* threads) {
  EngineOptions o;
  o.kv_memory = {.bytes = 8 << 20};
  auto e = EngineCore::Create(testing_util::TinyRandomModel(3), threads, std::move(o));
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

// Runs every sequence to its end in batched steps; returns each one's
// sampled tokens.
std::vector<std::vector<int32_t>> RunAll(EngineCore& e,
                                         const std::vector<SequenceId>& ids,
                                         const std::vector<int32_t>& prompt) {
  std::vector<std::vector<int32_t>> out(ids.size());
  std::vector<bool> done(ids.size(), false);
  std::vector<bool> prefilled(ids.size(), false);
  StepResult r;
  for (int step = 0; step < 200; ++step) {
    std::vector<StepPlanEntry> plan;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (done[i]) continue;
      plan.push_back({ids[i], prefilled[i] ? 1 : static_cast<int32_t>(prompt.size())});
      prefilled[i] = true;
    }
    if (plan.empty()) break;
    EXPECT_TRUE(e.Step(plan, &r).ok());
    for (const SequenceStepResult& s : r.sequences) {
      const size_t i = std::find(ids.begin(), ids.end(), s.id) - ids.begin();
      if (s.has_token) out[i].push_back(s.token);
      if (s.finish != FinishReason::kNone) done[i] = true;
    }
  }
  return out;
}

TEST(EngineGuideTest, ConstrainedSequencesInABatchStayInTheirGrammar) {
  auto compiler = grammar::GrammarCompiler::Create(TinyVocab(), {});
  ASSERT_TRUE(compiler.ok()) << compiler.status();
  grammar::GrammarSpec regex;
  regex.kind = grammar::GrammarSpec::Kind::kRegex;
  regex.text = "[a-c]{2,6}(x|yz)";
  grammar::GrammarSpec schema;
  schema.kind = grammar::GrammarSpec::Kind::kJsonSchema;
  schema.text = R"({"type": "object", "properties": {"n": {"type": "integer"},
      "s": {"type": "string", "maxLength": 5}}, "required": ["n", "s"],
      "additionalProperties": false})";
  auto g_regex = (*compiler)->Compile(regex);
  auto g_schema = (*compiler)->Compile(schema);
  ASSERT_TRUE(g_regex.ok() && g_schema.ok());
  ThreadPool threads(2);
  const std::vector<int32_t> prompt = {1, 40, 41, 42, 43};
  const std::regex re("[a-c]{2,6}(x|yz)");
  for (uint64_t round = 0; round < 6; ++round) {
    auto e = Core(&threads);
    std::vector<SequenceId> ids;
    for (int k = 0; k < 6; ++k) {
      SamplingParams p;
      p.temperature = k % 3 == 0 ? 0.0f : 1.0f;
      p.top_p = k % 3 == 2 ? 0.9f : 1.0f;
      p.seed = round * 100 + k;
      if (k % 2 == 0) p.grammar = *g_regex;
      if (k % 2 == 1 && k != 5) p.grammar = *g_schema;  // k = 5: free
      ASSERT_TRUE(e->AddSequence(k + 1, prompt, 256, p, {2}, 120).ok());
      ids.push_back(k + 1);
    }
    const auto out = RunAll(*e, ids, prompt);
    for (int k = 0; k < 6; ++k) {
      const std::string text = Text(out[k]);
      if (k == 5) continue;
      ASSERT_FALSE(out[k].empty());
      EXPECT_EQ(out[k].back(), 2) << "ends with the stop token: " << text;
      if (k % 2 == 0) {
        EXPECT_TRUE(std::regex_match(text, re)) << text;
      } else {
        const auto j = nlohmann::json::parse(text, nullptr, false);
        ASSERT_TRUE(j.is_object()) << text;
        EXPECT_TRUE((j["n"].is_number_integer() || std::floor(j["n"].get<double>()) == j["n"].get<double>()) && j["s"].is_string()) << text;
      }
    }
  }
}

TEST(EngineGuideTest, MaskedSamplerDrawsOnlyAllowedTokens) {
  std::vector<float> logits(97);
  for (int i = 0; i < 97; ++i) logits[i] = static_cast<float>(i % 7);
  std::vector<uint32_t> mask(grammar::MaskWords(97), 0);
  for (int id : {3, 10, 50, 96}) mask[id >> 5] |= 1u << (id & 31);
  SamplingParams greedy;
  auto g = Sampler::Create(greedy, 97);
  auto t = (*g)->Sample(logits, nullptr, mask.data());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->token, 96);  // 96 % 7 = 5 is the best allowed logit
  for (uint64_t seed = 0; seed < 200; ++seed) {
    SamplingParams p;
    p.temperature = 1.5f;
    p.seed = seed;
    p.top_k = seed % 2 ? 50 : 0;
    auto s = Sampler::Create(p, 97);
    auto tok = (*s)->Sample(logits, nullptr, mask.data());
    ASSERT_TRUE(tok.ok());
    EXPECT_TRUE(grammar::MaskAllows(mask.data(), tok->token)) << tok->token;
  }
  std::vector<uint32_t> none(grammar::MaskWords(97), 0);
  EXPECT_FALSE((*g)->Sample(logits, nullptr, none.data()).ok());
}

TEST(EngineGuideTest, ReasoningBudgetForcesTheEndMarker) {
  ThreadPool threads(2);
  auto e = Core(&threads);
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 5;
  p.reasoning.max_tokens = 4;
  p.reasoning.end_ids = {50, 51};
  p.reasoning.start_ids = {60};
  p.reasoning.starts_inside = true;
  // Nothing but the end marker may end it early: ids 50 / 51 are biased
  // away so the model does not close its reasoning by itself.
  p.logit_bias = {{50, -100.0f}, {51, -100.0f}, {60, -100.0f}};
  ASSERT_TRUE(e->AddSequence(1, {1, 40, 41}, 64, p, {}, 12).ok());
  const auto out = RunAll(*e, {1}, {1, 40, 41});
  ASSERT_EQ(out[0].size(), 12u);
  EXPECT_EQ(out[0][4], 50);
  EXPECT_EQ(out[0][5], 51);
  for (int i : {0, 1, 2, 3}) EXPECT_NE(out[0][i], 50);
}

TEST(EngineGuideTest, GuideStartsReasoningAtTheStartMarker) {
  SamplingParams p;
  p.reasoning.max_tokens = 2;
  p.reasoning.start_ids = {7, 8};
  p.reasoning.end_ids = {9};
  auto g = SequenceGuide::Create(p, 97);
  ASSERT_TRUE(g.ok() && *g != nullptr);
  SequenceGuide& guide = **g;
  bool done = false;
  for (int32_t t : {5, 7, 8}) {
    EXPECT_EQ(guide.Prepare(), SequenceGuide::Mode::kFree);
    ASSERT_TRUE(guide.Accept(t, &done).ok());
  }
  EXPECT_TRUE(guide.in_reasoning());
  for (int32_t t : {11, 12}) {
    EXPECT_EQ(guide.Prepare(), SequenceGuide::Mode::kFree);
    ASSERT_TRUE(guide.Accept(t, &done).ok());
  }
  ASSERT_EQ(guide.Prepare(), SequenceGuide::Mode::kForced);
  EXPECT_TRUE(grammar::MaskAllows(guide.mask(), 9));
  EXPECT_FALSE(grammar::MaskAllows(guide.mask(), 8));
  ASSERT_TRUE(guide.Accept(9, &done).ok());
  EXPECT_FALSE(guide.in_reasoning());
  EXPECT_EQ(guide.Prepare(), SequenceGuide::Mode::kFree);
  // Once closed, the start marker does not reopen it.
  ASSERT_TRUE(guide.Accept(7, &done).ok());
  ASSERT_TRUE(guide.Accept(8, &done).ok());
  EXPECT_FALSE(guide.in_reasoning());
}

// Resume by recompute (a preemption or a lost engine): a sequence restarted
// from prompt + its first k tokens, with resumed_outputs = k, produces the
// rest of what it produced straight through, with the penalties, a seeded
// draw, a grammar and a reasoning budget all in play.
TEST(EngineGuideTest, ResumedSequenceContinuesAsIfNeverInterrupted) {
  auto compiler = grammar::GrammarCompiler::Create(TinyVocab(), {});
  ASSERT_TRUE(compiler.ok()) << compiler.status();
  grammar::GrammarSpec regex;
  regex.kind = grammar::GrammarSpec::Kind::kRegex;
  regex.text = "[a-e]{8,12}(x|yz)";
  auto g = (*compiler)->Compile(regex);
  ASSERT_TRUE(g.ok()) << g.status();
  ThreadPool threads(2);
  const std::vector<int32_t> prompt = {1, 40, 41, 42, 43};
  for (int variant = 0; variant < 3; ++variant) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = 11 + variant;
    p.frequency_penalty = 1.5f;
    p.presence_penalty = 0.5f;
    p.repetition_penalty = 1.3f;
    int64_t max_new = 14;
    if (variant == 1) p.grammar = *g;
    if (variant == 2) {  // the reasoning budget is spent across the restart
      p.reasoning.max_tokens = 6;
      p.reasoning.end_ids = {50, 51};
      p.reasoning.starts_inside = true;
      p.logit_bias = {{50, -100.0f}, {51, -100.0f}};
    }
    auto straight_engine = Core(&threads);
    ASSERT_TRUE(
        straight_engine->AddSequence(1, prompt, 256, p, {2}, max_new).ok());
    const std::vector<int32_t> straight = RunAll(*straight_engine, {1}, prompt)[0];
    ASSERT_GE(straight.size(), 8u) << "variant " << variant;
    for (int64_t k : {1, 4, 7}) {
      std::vector<int32_t> resumed_prompt = prompt;
      resumed_prompt.insert(resumed_prompt.end(), straight.begin(),
                            straight.begin() + k);
      auto e = Core(&threads);
      ASSERT_TRUE(e->AddSequence(2, resumed_prompt, 256, p, {2}, max_new - k,
                                 nullptr, k)
                      .ok());
      const std::vector<int32_t> rest = RunAll(*e, {2}, resumed_prompt)[0];
      EXPECT_EQ(rest, std::vector<int32_t>(straight.begin() + k, straight.end()))
          << "variant " << variant << ", resumed after " << k << " tokens";
    }
  }
}

TEST(EngineGuideTest, ResumedOutputsAreChecked) {
  ThreadPool threads(2);
  auto e = Core(&threads);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(e->AddSequence(1, {1, 40, 41}, 64, greedy, {}, 4, nullptr, 3)
                .message(),
            "sequence 1: resumed_outputs 3 must be in [0, 3) for a prompt of "
            "3 tokens (at least one token of the original prompt)");
  EXPECT_FALSE(
      e->AddSequence(1, {1, 40, 41}, 64, greedy, {}, 4, nullptr, -1).ok());
  SamplingParams forced = greedy;
  forced.reasoning.max_tokens = 1;
  forced.reasoning.end_ids = {50};
  forced.reasoning.starts_inside = true;
  // One reasoning token spends the budget: the next must be the end marker.
  EXPECT_EQ(e->AddSequence(2, {1, 40, 41, 7, 8}, 64, forced, {}, 4, nullptr, 2)
                .message(),
            "sequence 2: resumed output 1 is token 8 but the end of the "
            "reasoning forces token 50");
  EXPECT_TRUE(
      e->AddSequence(3, {1, 40, 41, 7, 50}, 64, forced, {}, 4, nullptr, 2)
          .ok());
}

}  // namespace
}  // namespace pdserve
