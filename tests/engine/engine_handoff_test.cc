// Prefill/decode hand-off through EngineCore (issue 17): a prompt prefilled
// on one engine, its KV (and, for the Qwen3.5 hybrid, its linear-attention
// state) exported and imported into another, decodes exactly the greedy
// tokens of the whole request run on one engine; a decode engine of
// another capacity or KV dtype refuses the hand-off with the contract's
// message; HandoffTable bounds what waits to be fetched.
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/core/engine_core.h"
#include "engine/kv/kv_handoff.h"
#include "engine/loader/model_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/thread_pool.h"
#include "tests/engine/engine_core_test_util.h"
#include "tests/engine/hybrid_test_util.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const ModelWeights> Load(const std::string& path) {
  return testing_util::LoadModelFile(path);
}

std::unique_ptr<EngineCore> Engine(std::shared_ptr<const ModelWeights> w,
                                   ThreadPool* threads, int64_t max_seq_len,
                                   KvDType dtype = KvDType::kBF16) {
  EngineOptions o;
  o.kv_memory = {.bytes = 32 << 20};
  o.max_sequences = 4;
  o.max_step_tokens = 256;
  o.max_seq_len = max_seq_len;
  o.kv_dtype = dtype;
  auto e = EngineCore::Create(std::move(w), threads, std::move(o));
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// Decodes `id` (its prompt covered up to `pending` tokens) to the end.
std::vector<int32_t> Decode(EngineCore& e, SequenceId id, int32_t pending) {
  std::vector<int32_t> out;
  StepResult r;
  int32_t n = pending;
  for (int guard = 0; guard < 1000; ++guard) {
    absl::Status s = e.Step({{id, n}}, &r);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) break;
    if (r.sequences[0].has_token) out.push_back(r.sequences[0].token);
    if (r.sequences[0].finish != FinishReason::kNone) break;
    n = 1;
  }
  return out;
}

std::vector<int32_t> Prompt(int64_t vocab, int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(1 + (i * 37 + 11) % (vocab - 1));
  return p;
}

// Prefills `prompt` on `prefill` (max_new_tokens 1, exported) and returns
// its first token and hand-off.
std::pair<int32_t, KvHandoff> PrefillAndExport(
    EngineCore& prefill, const std::vector<int32_t>& prompt) {
  EXPECT_TRUE(prefill.AddSequence(7, prompt, 256, {}, {}, 1).ok());
  EXPECT_TRUE(prefill.MarkForExport(7).ok());
  std::vector<int32_t> first =
      Decode(prefill, 7, static_cast<int32_t>(prompt.size()));
  EXPECT_EQ(first.size(), 1u);
  auto exports = prefill.TakeExports();
  EXPECT_EQ(exports.size(), 1u);
  EXPECT_TRUE(prefill.TakeExports().empty());
  if (first.empty() || exports.empty()) return {-1, KvHandoff()};
  EXPECT_EQ(exports[0].first, 7u);
  KvHandoff h = std::move(exports[0].second);
  h.model = "m";
  EXPECT_EQ(h.tokens, prompt);
  return {first[0], std::move(h)};
}

void ExpectHandoffDecodesLikeOneEngine(std::shared_ptr<const ModelWeights> w,
                                       int prompt_len) {
  ThreadPool threads(2);
  const int kNew = 12;
  const std::vector<int32_t> prompt =
      Prompt(w->config.vocab_size, prompt_len);
  auto solo_engine = Engine(w, &threads, 256);
  ASSERT_NE(solo_engine, nullptr);
  ASSERT_TRUE(solo_engine->AddSequence(1, prompt, 256, {}, {}, kNew).ok());
  const std::vector<int32_t> solo =
      Decode(*solo_engine, 1, static_cast<int32_t>(prompt.size()));
  ASSERT_EQ(solo.size(), static_cast<size_t>(kNew));

  auto prefill = Engine(w, &threads, 256);
  auto decode = Engine(w, &threads, 256);
  auto [first, handoff] = PrefillAndExport(*prefill, prompt);
  EXPECT_EQ(first, solo[0]);
  std::vector<int32_t> resumed = prompt;
  resumed.push_back(first);
  ASSERT_TRUE(decode->AddSequence(3, resumed, 256, {}, {}, kNew - 1, nullptr,
                                  /*resumed_outputs=*/1)
                  .ok());
  absl::Status s = decode->ImportKv(3, handoff, "m");
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(decode->CachedPrefixTokens(3), prompt_len);
  std::vector<int32_t> out = {first};
  for (int32_t t : Decode(*decode, 3, static_cast<int32_t>(resumed.size()))) {
    out.push_back(t);
  }
  EXPECT_EQ(out, solo);
}

TEST(EngineHandoffTest, DenseHandoffDecodesLikeOneEngine) {
  auto w = Load(std::string(PDSERVE_SHARED_DIR) +
                "/models/stories260K/stories260K.bin");
  if (w == nullptr) GTEST_SKIP() << "no ../shared/models/stories260K";
  ExpectHandoffDecodesLikeOneEngine(w, 45);  // pages 16: a partial last page
}

TEST(EngineHandoffTest, HybridHandoffCarriesTheLinearState) {
  auto w = Load(hybrid_test::kHybridDir + "/tiny_qwen35");
  ASSERT_NE(w, nullptr);
  ASSERT_GT(w->config.linear_state_floats(), 0);
  ExpectHandoffDecodesLikeOneEngine(w, 37);
}

TEST(EngineHandoffTest, AnotherCapacityOrDtypeIsRefused) {
  auto w = Load(hybrid_test::kHybridDir + "/tiny_qwen35");
  ASSERT_NE(w, nullptr);
  ThreadPool threads(2);
  auto prefill = Engine(w, &threads, 256);
  const std::vector<int32_t> prompt = Prompt(w->config.vocab_size, 20);
  auto [first, handoff] = PrefillAndExport(*prefill, prompt);
  std::vector<int32_t> resumed = prompt;
  resumed.push_back(first);

  auto other_capacity = Engine(w, &threads, 128);
  ASSERT_TRUE(
      other_capacity->AddSequence(3, resumed, 128, {}, {}, 4, nullptr, 1).ok());
  absl::Status s = other_capacity->ImportKv(3, handoff, "m");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "prefill KV capacity 256 != decode KV capacity 128");
  // The sequence is untouched: it prefills locally instead.
  EXPECT_EQ(other_capacity->CachedPrefixTokens(3), 0);
  EXPECT_FALSE(Decode(*other_capacity, 3, 21).empty());

  auto other_dtype = Engine(w, &threads, 256, KvDType::kF32);
  ASSERT_TRUE(
      other_dtype->AddSequence(3, resumed, 256, {}, {}, 4, nullptr, 1).ok());
  s = other_dtype->ImportKv(3, handoff, "m");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "hand-off KV layout differs: kv_dtype bf16 != f32");

  auto same = Engine(w, &threads, 256);
  ASSERT_TRUE(same->AddSequence(3, resumed, 256, {}, {}, 4, nullptr, 1).ok());
  s = same->ImportKv(3, handoff, "other-model");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("cannot be decoded by model"));
  // A prompt the hand-off is not a prefix of.
  std::vector<int32_t> wrong = resumed;
  wrong[0] = wrong[0] == 1 ? 2 : 1;
  ASSERT_TRUE(same->AddSequence(4, wrong, 256, {}, {}, 4, nullptr, 1).ok());
  s = same->ImportKv(4, handoff, "m");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not a proper prefix"));
  // A tampered mask fails the contract's mask check.
  KvHandoff bad = handoff;
  bad.mask[3] = 0;
  s = same->ImportKv(3, bad, "m");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not a contiguous prefix"));
  bad = handoff;
  bad.kv.resize(bad.kv.size() - 1);
  s = same->ImportKv(3, bad, "m");
  EXPECT_THAT(s.message(), HasSubstr("bytes of KV pages"));
  s = same->ImportKv(3, handoff, "m");
  EXPECT_TRUE(s.ok()) << s;
}

KvHandoff Sized(int64_t bytes) {
  KvHandoff h;
  h.kv.assign(static_cast<size_t>(bytes), 'x');
  return h;
}

TEST(HandoffTableTest, BoundedByBytesAndTime) {
  HandoffTable table(/*max_bytes=*/1000, /*ttl_ns=*/100, /*id_salt=*/1 << 20);
  const uint64_t a = table.Put(Sized(400), 0);
  const uint64_t b = table.Put(Sized(400), 10);
  EXPECT_NE(a, 0u);
  EXPECT_NE(b, a);
  EXPECT_EQ(table.bytes(), 800);
  EXPECT_EQ(table.Put(Sized(1001), 10), 0u);  // larger than the bound
  const uint64_t c = table.Put(Sized(400), 20);  // evicts a, the oldest
  EXPECT_FALSE(table.Take(a, 20).has_value());
  EXPECT_EQ(table.dropped(), 1);
  std::optional<KvHandoff> got = table.Take(b, 30);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->kv.size(), 400u);
  EXPECT_FALSE(table.Take(b, 30).has_value());  // one fetch
  EXPECT_FALSE(table.Take(c, 120).has_value());  // expired (put at 20)
  EXPECT_EQ(table.size(), 0);
  EXPECT_EQ(table.bytes(), 0);
  EXPECT_EQ(table.dropped(), 2);
  // Another salt (a restarted engine) names other ids.
  HandoffTable other(1000, 100, 2 << 20);
  EXPECT_NE(other.Put(Sized(1), 0), table.Put(Sized(1), 0));
}

}  // namespace
}  // namespace pdserve
