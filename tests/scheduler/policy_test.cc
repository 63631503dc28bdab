// Policy tests written as token diagrams. Each line is one step:
//   "-A ^B +C | A1 C4p"   release A, preempt B, admit C | A decodes one
//   token, C prefills 4 prompt tokens.
// Requests are named by letters (id 'A' == 65).
#include "scheduler/policy.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Drives a policy: Plan(), then Commit() with `finish` ids marked finished.
class Driver {
 public:
  Driver(PolicyConfig config, PoolGeometry pool) : policy(config, pool) {}

  void Submit(char id, int64_t prompt, int64_t max_new, int32_t priority = 0) {
    ASSERT_TRUE(
        policy.Submit({static_cast<SequenceId>(id), priority, prompt, max_new})
            .ok());
  }
  std::string Step(std::vector<char> finish = {}) {
    StepPlan plan = policy.Plan();
    std::vector<ItemOutcome> outcomes;
    for (const PlanItem& item : plan.items) {
      bool f = false;
      for (char c : finish) f |= item.id == static_cast<SequenceId>(c);
      outcomes.push_back({item.id, f});
    }
    policy.Commit(outcomes);
    return DescribePlan(plan);
  }
  std::vector<std::string> Steps(int n) {
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) out.push_back(Step());
    return out;
  }

  Policy policy;
};

PoolGeometry Pool(int64_t page_size, int64_t pages, int64_t max_seq_len) {
  return {page_size, pages, max_seq_len};
}

TEST(PolicyTest, DecodesFirstThenChunkedPrefillWithinBudget) {
  Driver d({.step_token_budget = 8, .prefill_chunk = 4}, Pool(4, 100, 64));
  d.Submit('A', 10, 3);
  d.Submit('B', 3, 3);
  EXPECT_THAT(d.Steps(6),
              ElementsAre("+A +B | A4p B3p",  // 7 of 8 tokens
                          "| B1 A4p",         // decode first
                          "| B1 A2p",         // A's prompt done, B's 3rd token
                          "-B | A1",          // B released
                          "| A1",             // A's 3rd token
                          "-A |"));
  EXPECT_TRUE(d.policy.idle());
  EXPECT_EQ(d.policy.free_pages(), 100);
}

// A pipelined shell commits each plan before its outcome arrives and marks
// finishes later: the step already planned still carries the finished
// sequence (the engine reports it without running); the next plan releases
// it and its pages return.
TEST(PolicyTest, PlansCountTheirAttentionWork) {
  Driver d({.step_token_budget = 8, .prefill_chunk = 4}, Pool(4, 100, 64));
  d.Submit('A', 6, 3);
  StepPlan first = d.policy.Plan();  // A's tokens 0..3 attend 1+2+3+4
  EXPECT_EQ(first.attended_pairs, 10);
  EXPECT_EQ(d.policy.next_prefill_position(), 0);  // as planned, not done
  d.policy.Commit({});
  EXPECT_EQ(d.policy.next_prefill_position(), 4);
  StepPlan second = d.policy.Plan();  // tokens 4, 5: 5 + 6
  EXPECT_EQ(second.attended_pairs, 11);
  d.policy.Commit({});
  EXPECT_EQ(d.policy.decoding(), 1);
  EXPECT_EQ(d.policy.decoding_kv_tokens(), 6);
  StepPlan decode = d.policy.Plan();  // context 6: attends 7
  EXPECT_EQ(decode.attended_pairs, 7);
  d.policy.Commit({});
}

TEST(PolicyTest, OptimisticCommitThenLateFinish) {
  Driver d({.step_token_budget = 8, .prefill_chunk = 4}, Pool(4, 100, 64));
  d.Submit('A', 3, 10);
  d.Submit('B', 2, 10);
  EXPECT_EQ(d.policy.decoding(), 0);
  EXPECT_EQ(d.Step(), "+A +B | A3p B2p");  // outcome: both continue
  EXPECT_EQ(d.policy.decoding(), 2);
  EXPECT_EQ(d.Step(), "| A1 B1");  // in flight when B's stop arrives
  d.policy.MarkFinished('B');
  d.policy.MarkFinished('B');  // repeated reports are harmless
  d.policy.MarkFinished('Z');  // unknown ids too
  EXPECT_EQ(d.policy.decoding(), 1);
  EXPECT_EQ(d.Step(), "-B | A1");
  EXPECT_FALSE(d.policy.Contains('B'));
  d.policy.MarkFinished('A');
  EXPECT_EQ(d.Step(), "-A |");
  EXPECT_TRUE(d.policy.idle());
  EXPECT_EQ(d.policy.free_pages(), 100);
}

// The engine reports that B's admission found 12 of its 18 prompt tokens in
// its prefix cache while the next step (chunk 4 of B) is already planned:
// the step after that carries the 4 cached tokens not yet planned, for free
// ("(4c)": outside the budget and the chunk), plus a real chunk. The last
// prompt token is always real work; a report past the planned part, or for
// an unknown or decoding sequence, changes nothing.
TEST(PolicyTest, CachedPrefixJoinsTheNextChunkForFree) {
  Driver d({.step_token_budget = 6, .prefill_chunk = 4}, Pool(4, 100, 64));
  d.Submit('A', 2, 9);
  d.Submit('B', 18, 3);
  EXPECT_EQ(d.Step(), "+A +B | A2p B4p");
  EXPECT_EQ(d.Step(), "| A1 B4p");  // planned before the report arrives
  d.policy.MarkPrefixCached('B', 12);
  d.policy.MarkPrefixCached('Z', 12);
  d.policy.MarkPrefixCached('A', 12);   // decoding: ignored
  EXPECT_EQ(d.Step(), "| A1 B8p(4c)");  // 8..12 cached, 12..16 computed
  EXPECT_EQ(d.Step(), "| A1 B2p");
  EXPECT_EQ(d.Step(), "| A1 B1");
  EXPECT_EQ(d.policy.View('B').prefilled, 18);
  // A whole prompt cached but its last token: one free item, one real token.
  d.Submit('C', 9, 2);
  EXPECT_EQ(d.Step(), "+C | A1 B1 C4p");
  d.policy.MarkPrefixCached('C', 9);
  EXPECT_EQ(d.Step(), "-B | A1 C5p(4c)");
  EXPECT_EQ(d.policy.View('C').prefilled, 9);
}

// A decode cell's request whose prompt KV came from a prefill cell
// (RequestSpec.imported_tokens): its first item carries the imported
// tokens for free and computes only the rest (the first token, fed back),
// even with a budget and chunk far below the prompt; it takes pages for
// the whole prompt at admission. A preempted one recomputes everything.
TEST(PolicyTest, ImportedTokensRideTheFirstItemForFree) {
  Driver d({.step_token_budget = 4, .prefill_chunk = 2}, Pool(4, 100, 64));
  RequestSpec spec{'A', 0, 41, 5};
  spec.imported_tokens = 40;
  ASSERT_TRUE(d.policy.Submit(spec).ok());
  EXPECT_EQ(d.Step(), "+A | A41p(40c)");
  EXPECT_EQ(d.policy.View('A').prefilled, 41);
  EXPECT_EQ(d.policy.Pages('A').size(), 11u);  // 41 tokens + 1, pages of 4
  EXPECT_EQ(d.Step(), "| A1");
  // Out of range: at least one prompt token is computed here.
  RequestSpec bad{'B', 0, 10, 5};
  bad.imported_tokens = 10;
  absl::Status s = d.policy.Submit(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("10 imported tokens must be in [0, 10)"));
}

TEST(PolicyTest, BudgetCapsPrefillAcrossSequences) {
  Driver d({.step_token_budget = 6, .prefill_chunk = 4}, Pool(4, 100, 64));
  d.Submit('A', 5, 2);
  d.Submit('B', 5, 2);
  d.Submit('C', 5, 2);
  EXPECT_THAT(d.Steps(4), ElementsAre("+A +B | A4p B2p", "+C | A1p B3p C2p",
                                      "| A1 B1 C3p", "-A -B | C1"));
}

TEST(PolicyTest, ChunkingOffPrefillsWholePromptAndOverrunsBudgetAlone) {
  Driver d({.step_token_budget = 6, .prefill_chunk = 0}, Pool(4, 100, 64));
  d.Submit('A', 2, 4);
  EXPECT_EQ(d.Step(), "+A | A2p");
  d.Submit('B', 10, 1);
  // Chunking off: B's 10 tokens go in one step, stalling A's decode with it.
  EXPECT_EQ(d.Step(), "+B | A1 B10p");
  d.Submit('C', 10, 1);
  d.Submit('D', 3, 1);
  // C (10) overruns the 5 tokens left after A's decode because it is the
  // step's only prefill; D waits behind it (FCFS, budget spent).
  EXPECT_EQ(d.Step(), "-B +C | A1 C10p");
  EXPECT_EQ(d.Step(), "-C +D | A1 D3p");
}

TEST(PolicyTest, HardStepCapSplitsEvenWithChunkingOff) {
  Driver d({.step_token_budget = 6, .prefill_chunk = 0, .max_step_tokens = 8},
           Pool(4, 100, 64));
  d.Submit('A', 2, 4);
  EXPECT_EQ(d.Step(), "+A | A2p");
  d.Submit('B', 10, 1);
  // The engine takes at most 8 tokens a step: B's prompt is split after all.
  EXPECT_THAT(d.Steps(2), ElementsAre("+B | A1 B7p", "| A1 B3p"));
}

TEST(PolicyTest, BudgetCanBeChangedBetweenSteps) {
  Driver d({.step_token_budget = 16, .prefill_chunk = 16}, Pool(4, 100, 64));
  d.Submit('A', 2, 8);
  EXPECT_EQ(d.Step(), "+A | A2p");
  d.Submit('B', 20, 1);
  d.policy.set_step_token_budget(5);  // the shell adapts it to step costs
  EXPECT_THAT(d.Steps(2), ElementsAre("+B | A1 B4p", "| A1 B4p"));
}

TEST(PolicyTest, ChunkingOnKeepsDecodeStepsSmall) {
  Driver d({.step_token_budget = 6, .prefill_chunk = 4}, Pool(4, 100, 64));
  d.Submit('A', 2, 4);
  EXPECT_EQ(d.Step(), "+A | A2p");
  d.Submit('B', 10, 1);
  EXPECT_THAT(d.Steps(3), ElementsAre("+B | A1 B4p", "| A1 B4p", "| A1 B2p"));
}

TEST(PolicyTest, AdmissionWaitsForPages) {
  // 4 pages of 4 tokens. A (10 tokens) reserves 3 pages; B needs 2 (its 6
  // prompt tokens plus one decode token) and waits until A is released.
  Driver d({.step_token_budget = 32, .prefill_chunk = 16}, Pool(4, 4, 16));
  d.Submit('A', 10, 2);
  d.Submit('B', 6, 3);
  EXPECT_EQ(d.Step(), "+A | A10p");
  EXPECT_EQ(d.policy.waiting(), 1);
  EXPECT_EQ(d.policy.free_pages(), 1);
  EXPECT_EQ(d.Step(), "| A1");
  EXPECT_EQ(d.Step(), "-A +B | B6p");
  EXPECT_EQ(d.policy.free_pages(), 2);
}

TEST(PolicyTest, HeadOfLineBlocksSmallerRequestsBehindIt) {
  Driver d({.step_token_budget = 32, .prefill_chunk = 16}, Pool(4, 4, 16));
  d.Submit('A', 8, 3);   // 2 pages, 3 with its decodes
  d.Submit('B', 12, 1);  // needs 4 pages: waits
  d.Submit('C', 2, 1);   // would fit (1 page), but arrived after B
  EXPECT_THAT(d.Steps(3), ElementsAre("+A | A8p", "| A1", "| A1"));
  EXPECT_EQ(d.Step(), "-A +B +C | B12p C2p");
}

TEST(PolicyTest, PriorityFirstThenFcfs) {
  Driver d({.step_token_budget = 32, .prefill_chunk = 16, .max_running = 1},
           Pool(4, 100, 64));
  d.Submit('A', 2, 1);
  d.Submit('B', 2, 1);
  d.Submit('C', 2, 1, /*priority=*/5);
  d.Submit('D', 2, 1, /*priority=*/5);
  EXPECT_THAT(d.Steps(5), ElementsAre("+C | C2p", "-C +D | D2p", "-D +A | A2p",
                                      "-A +B | B2p", "-B |"));
}

TEST(PolicyTest, GrowthPreemptsLowestPriorityLatestArrival) {
  // 4 pages of 4 tokens. A (priority 1), B, C hold one page each after their
  // 4-token prompts (admission checks room for one decode token: 2 pages).
  Driver d({.step_token_budget = 32, .prefill_chunk = 16}, Pool(4, 4, 32));
  d.Submit('A', 4, 8, /*priority=*/1);
  d.Submit('B', 4, 8);
  d.Submit('C', 4, 8);
  EXPECT_EQ(d.Step(), "+A +B +C | A4p B4p C4p");
  // Decodes write position 4: a second page each; 3 needed, 1 free. C
  // (priority 0, latest) is preempted; A and B fit.
  EXPECT_EQ(d.Step(), "^C | A1 B1");
  EXPECT_EQ(d.policy.View('C').generated, 1);
  EXPECT_EQ(d.policy.View('C').pages, 0);
  // C waits: its recomputed prompt (4 + 1) needs 2 pages, none free.
  EXPECT_THAT(d.Steps(3), ElementsAre("| A1 B1", "| A1 B1", "| A1 B1"));
  // Position 8 needs third pages: B goes; A, higher priority, keeps running.
  EXPECT_EQ(d.Step(), "^B | A1");
  EXPECT_EQ(d.policy.View('B').generated, 5);
  EXPECT_EQ(d.policy.preemptions(), 2);
  EXPECT_THAT(d.Steps(2), ElementsAre("| A1", "| A1"));
  // A done: B, ahead of C (same priority, earlier arrival), is readmitted
  // with its prompt plus its 5 generated tokens recomputed by prefill.
  EXPECT_EQ(d.Step(), "-A +B | B9p");
  EXPECT_EQ(d.policy.View('B').generated, 6);
  EXPECT_EQ(d.policy.View('B').kv_tokens, 9);
}

TEST(PolicyTest, PreemptedSequenceResumesAndFinishesWithAllItsTokens) {
  Driver d({.step_token_budget = 32, .prefill_chunk = 16}, Pool(4, 3, 32));
  d.Submit('A', 4, 6);
  d.Submit('B', 4, 6);
  int steps = 0;
  while (!d.policy.idle() && steps < 100) {
    d.Step();
    ++steps;
    EXPECT_GE(d.policy.free_pages(), 0);
  }
  EXPECT_TRUE(d.policy.idle());
  EXPECT_GE(d.policy.preemptions(), 1);
  EXPECT_EQ(d.policy.free_pages(), 3);
}

TEST(PolicyTest, CancellationLeavesPlanAndFreesPagesNextStep) {
  Driver d({.step_token_budget = 32, .prefill_chunk = 16, .max_running = 1},
           Pool(4, 8, 32));
  d.Submit('A', 6, 10);
  d.Submit('B', 3, 1);
  EXPECT_EQ(d.Step(), "+A | A6p");
  EXPECT_EQ(d.policy.free_pages(), 6);
  EXPECT_TRUE(d.policy.Cancel('A'));
  EXPECT_FALSE(d.policy.Cancel('A'));  // already marked
  StepPlan plan = d.policy.Plan();
  EXPECT_EQ(DescribePlan(plan), "-A +B | B3p");
  EXPECT_THAT(plan.cancelled, ElementsAre('A'));
  EXPECT_EQ(d.policy.free_pages(), 7);  // A's 2 back, B's 1 taken
}

TEST(PolicyTest, CancelWhileWaitingDropsWithoutRelease) {
  Driver d({.step_token_budget = 32, .prefill_chunk = 16, .max_running = 1},
           Pool(4, 8, 32));
  d.Submit('A', 2, 5);
  d.Submit('B', 2, 5);
  EXPECT_EQ(d.Step(), "+A | A2p");
  EXPECT_TRUE(d.policy.Cancel('B'));
  StepPlan plan = d.policy.Plan();
  EXPECT_EQ(DescribePlan(plan), "| A1");
  EXPECT_THAT(plan.cancelled, ElementsAre('B'));
  EXPECT_EQ(d.policy.waiting(), 0);
}

TEST(PolicyTest, QueueBoundAnswersResourceExhaustedWithLength) {
  Policy p({.max_running = 1, .max_waiting = 2}, Pool(4, 8, 32));
  ASSERT_TRUE(p.Submit({1, 0, 2, 1}).ok());
  ASSERT_TRUE(p.Submit({2, 0, 2, 1}).ok());
  absl::Status s = p.Submit({3, 0, 2, 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("2 requests waiting (bound 2)"));
  // A request resumed after a lost engine held its place: not refused.
  RequestSpec resumed{3, 0, 2, 1};
  resumed.resumed = true;
  EXPECT_TRUE(p.Submit(resumed).ok());
  EXPECT_EQ(p.waiting(), 3);
  EXPECT_EQ(p.Submit({4, 0, 2, 1}).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(PolicyTest, RejectsWhatCanNeverFit) {
  Policy p({}, Pool(4, 2, 32));
  absl::Status s = p.Submit({1, 0, 40, 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(),
              HasSubstr("40 tokens exceeds the sequence capacity of 32"));
  s = p.Submit({2, 0, 8, 1});  // 9 tokens need 3 pages of the 2
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("needs 3 KV pages"));
  EXPECT_EQ(p.Submit({3, 0, 0, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.Submit({4, 0, 2, 0}).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(p.Submit({5, 0, 2, 1}).ok());
  EXPECT_EQ(p.Submit({5, 0, 2, 1}).code(), absl::StatusCode::kInvalidArgument);
}

// A short prompt arriving while a long one is prefilled in chunks passes
// it when its whole prompt fits the step (its first token comes at once),
// but never in two steps running: the long prompt keeps every other step.
TEST(PolicyTest, ShortPromptsPassALongChunkedPrefill) {
  Driver d({.step_token_budget = 8, .prefill_chunk = 8}, Pool(4, 100, 64));
  d.Submit('A', 40, 2);
  EXPECT_EQ(d.Step(), "+A | A8p");
  d.Submit('B', 3, 2);
  d.Submit('C', 4, 2);
  d.Submit('D', 12, 2);  // never fits one step: waits its turn
  EXPECT_THAT(d.Steps(4),
              ElementsAre("+B +C | B3p C4p A1p",  // both pass A
                          "| B1 C1 A6p",          // A's step: none passes
                          "-B -C | A8p",          // D never fits one step
                          "| A8p"));
}

TEST(PolicyTest, StrictOrderWithoutShortPromptsPassing) {
  Driver d({.step_token_budget = 8, .prefill_chunk = 8,
            .short_prompts_pass = false},
           Pool(4, 100, 64));
  d.Submit('A', 20, 2);
  EXPECT_EQ(d.Step(), "+A | A8p");
  d.Submit('B', 3, 2);
  EXPECT_THAT(d.Steps(3), ElementsAre("| A8p", "+B | A4p B3p", "| A1 B1"));
}

// A lower-priority short prompt does not pass a higher-priority long one,
// nor does anything pass in a step that had to preempt.
TEST(PolicyTest, ShortPromptsPassOnlyAtTheirPriority) {
  Driver d({.step_token_budget = 8, .prefill_chunk = 8}, Pool(4, 100, 64));
  d.Submit('A', 20, 2, /*priority=*/1);
  EXPECT_EQ(d.Step(), "+A | A8p");
  d.Submit('B', 3, 2, /*priority=*/0);
  EXPECT_THAT(d.Steps(2), ElementsAre("| A8p", "+B | A4p B3p"));
}

// Random workloads: invariants hold every step and every request ends with
// exactly max_new_tokens tokens.
TEST(PolicyTest, RandomWorkloadsKeepInvariants) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t chunk = trial % 3 == 0 ? 0 : 1 + rng() % 16;
    PolicyConfig config{
        .step_token_budget = 8 + static_cast<int64_t>(rng() % 24),
        .prefill_chunk = chunk,
        .max_running = 1 + static_cast<int64_t>(rng() % 6)};
    Policy p(config, Pool(4, 6 + rng() % 10, 24));
    std::vector<RequestSpec> reqs;
    absl::flat_hash_map<SequenceId, int64_t> tokens;
    for (SequenceId id = 1; id <= 12; ++id) {
      RequestSpec r{id, static_cast<int32_t>(rng() % 3),
                    1 + static_cast<int64_t>(rng() % 12),
                    1 + static_cast<int64_t>(rng() % 8)};
      ASSERT_TRUE(p.Submit(r).ok());
      reqs.push_back(r);
    }
    int steps = 0;
    while (!p.idle() && steps++ < 2000) {
      StepPlan plan = p.Plan();
      ASSERT_GE(p.free_pages(), 0);
      int64_t used = 0;
      for (const auto& r : reqs) used += p.View(r.id).pages;
      ASSERT_EQ(used + p.free_pages(), p.pool().total_pages);
      bool seen_prefill = false;
      int64_t total = 0;
      for (const PlanItem& item : plan.items) {
        ASSERT_FALSE(!item.prefill && seen_prefill) << "decode after prefill";
        seen_prefill |= item.prefill;
        total += item.num_tokens;
        if (item.completes_prompt || !item.prefill) {
          ++tokens[item.id];
        }
      }
      if (chunk > 0) {
        ASSERT_LE(total, config.step_token_budget);
      }
      for (SequenceId id : plan.preempted) {
        // Tokens produced before preemption stay counted; the recomputed
        // prompt yields the next one.
        ASSERT_EQ(tokens[id], p.View(id).generated);
      }
      std::vector<ItemOutcome> outcomes;
      for (const PlanItem& item : plan.items)
        outcomes.push_back({item.id, false});
      p.Commit(outcomes);
    }
    ASSERT_TRUE(p.idle()) << "trial " << trial << " did not drain";
    for (const auto& r : reqs) EXPECT_EQ(tokens[r.id], r.max_new_tokens);
    EXPECT_EQ(p.free_pages(), p.pool().total_pages);
  }
}

}  // namespace
}  // namespace pdserve::scheduler

namespace pdserve::scheduler {
namespace {

// Requests with known prompt tokens: `shared` tokens of a common system
// prompt (token 7s) then `own` tokens unique to the request.
RequestSpec WithPrompt(char id, int64_t shared, int64_t own, int64_t max_new) {
  RequestSpec r{static_cast<SequenceId>(id), 0, shared + own, max_new};
  r.prompt_tokens.assign(static_cast<size_t>(shared), 7);
  for (int64_t i = 0; i < own; ++i) {
    r.prompt_tokens.push_back(static_cast<int32_t>(1000 * id + i));
  }
  return r;
}

PoolGeometry CachedPool(int64_t page_size, int64_t pages, int64_t max_seq_len) {
  PoolGeometry g{page_size, pages, max_seq_len};
  g.prefix_cache = true;
  return g;
}

// The ledger finds a shared prefix before planning: B's first 8 tokens are
// A's pages, so B is admitted with them cached ("B10p(8c)": 8 cached + 2
// computed) and they are counted once: A holds 3 pages, B only 1 more.
TEST(PolicyLedgerTest, SharedPrefixPagesAreCountedOnce) {
  Policy p({.step_token_budget = 64, .prefill_chunk = 64},
           CachedPool(4, 20, 64));
  ASSERT_TRUE(p.Submit(WithPrompt('A', 8, 2, 4)).ok());
  StepPlan a = p.Plan();
  p.Commit({});
  EXPECT_EQ(DescribePlan(a), "+A | A10p");
  ASSERT_EQ(a.admit_pages.size(), 1u);
  EXPECT_TRUE(a.admit_pages[0].prefix_pages.empty());
  EXPECT_EQ(a.admit_pages[0].pages.size(), 3u);  // 10 tokens in pages of 4
  EXPECT_EQ(p.free_pages(), 17);
  ASSERT_TRUE(p.Submit(WithPrompt('B', 8, 2, 4)).ok());
  StepPlan b = p.Plan();
  p.Commit({});
  EXPECT_EQ(DescribePlan(b), "+B | A1 B10p(8c)");
  ASSERT_EQ(b.admit_pages.size(), 1u);
  // B shares A's two full system-prompt pages and takes one page of its own.
  EXPECT_THAT(b.admit_pages[0].prefix_pages,
              ElementsAre(p.Pages('A')[0], p.Pages('A')[1]));
  EXPECT_EQ(b.admit_pages[0].pages.size(), 1u);
  EXPECT_EQ(p.free_pages(), 16);  // A's decode fits in its third page
  EXPECT_EQ(p.View('B').pages, 3);
  // A finishes: its shared pages stay, held by B; its own page is free.
  StepPlan c = p.Plan();
  std::vector<ItemOutcome> done = {{'A', true}, {'B', false}};
  p.Commit(done);
  EXPECT_EQ(DescribePlan(c), "| A1 B1");
  StepPlan d = p.Plan();
  p.Commit({});
  EXPECT_EQ(DescribePlan(d), "-A | B1");
  EXPECT_EQ(p.free_pages(), 17);
}

// A prefix the engine has not computed yet cannot be shared: two requests
// admitted in the same step each take their own pages.
TEST(PolicyLedgerTest, OnlyWrittenPagesAreShared) {
  Policy p({.step_token_budget = 64, .prefill_chunk = 64},
           CachedPool(4, 20, 64));
  ASSERT_TRUE(p.Submit(WithPrompt('A', 8, 2, 4)).ok());
  ASSERT_TRUE(p.Submit(WithPrompt('B', 8, 2, 4)).ok());
  StepPlan plan = p.Plan();
  EXPECT_EQ(DescribePlan(plan), "+A +B | A10p B10p");
  EXPECT_EQ(p.free_pages(), 14);
}

// The waiting head is admitted only when its pages, less the shared ones,
// fit: with 6 free pages, 4-page prompts whose first 2 pages are cached fit
// three times where one would fit without the prefix.
TEST(PolicyLedgerTest, AdmissionCountsOnlyUnsharedPages) {
  Policy p({.step_token_budget = 256, .prefill_chunk = 256},
           CachedPool(4, 10, 64));
  ASSERT_TRUE(p.Submit(WithPrompt('A', 8, 7, 8)).ok());  // 15 tokens, 4 pages
  EXPECT_EQ(DescribePlan(p.Plan()), "+A | A15p");
  p.Commit({});
  EXPECT_EQ(p.free_pages(), 6);
  for (char id : {'B', 'C', 'D', 'E'}) {
    ASSERT_TRUE(p.Submit(WithPrompt(id, 8, 7, 8)).ok());
  }
  // Each needs 2 pages of its own (its 7 tokens + 1 decode, from position
  // 8) besides the 2 shared: B, C and D fit in the 6 free pages, E waits
  // (A's decode takes nothing: its 16th token fits its 4th page).
  EXPECT_EQ(DescribePlan(p.Plan()), "+B +C +D | A1 B15p(8c) C15p(8c) D15p(8c)");
  p.Commit({});
  EXPECT_EQ(p.free_pages(), 0);
  EXPECT_EQ(p.waiting(), 1);
  EXPECT_EQ(p.running(), 4);
}

// Without the prompt's tokens (or without the pool's prefix cache) nothing
// is shared: the accounting is the full prompt as before.
TEST(PolicyLedgerTest, NoTokensOrNoCacheMeansNoSharing) {
  Policy p({.step_token_budget = 64, .prefill_chunk = 64}, Pool(4, 20, 64));
  ASSERT_TRUE(p.Submit(WithPrompt('A', 8, 2, 4)).ok());
  EXPECT_EQ(DescribePlan(p.Plan()), "+A | A10p");
  p.Commit({});
  ASSERT_TRUE(p.Submit(WithPrompt('B', 8, 2, 4)).ok());
  EXPECT_EQ(DescribePlan(p.Plan()), "+B | A1 B10p");
  EXPECT_EQ(p.free_pages(), 14);
}

// A request cancelled before the engine ran its prefill leaves no prefix
// behind: the next one with the same prompt computes it again.
TEST(PolicyLedgerTest, CancelledPrefillIsNotShared) {
  Policy p({.step_token_budget = 64, .prefill_chunk = 64},
           CachedPool(4, 20, 64));
  ASSERT_TRUE(p.Submit(WithPrompt('A', 8, 2, 4)).ok());
  EXPECT_EQ(DescribePlan(p.Plan()), "+A | A10p");
  p.Commit({});
  EXPECT_TRUE(p.Cancel('A'));
  ASSERT_TRUE(p.Submit(WithPrompt('B', 8, 2, 4)).ok());
  EXPECT_EQ(DescribePlan(p.Plan()), "-A +B | B10p");
  EXPECT_EQ(p.free_pages(), 17);
}

}  // namespace
}  // namespace pdserve::scheduler
