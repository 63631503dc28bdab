// Token sampling: greedy, temperature, top-k, top-p, min-p and repetition /
// presence / frequency penalties, seeded and reproducible.
#ifndef PDSERVE_ENGINE_MODEL_SAMPLER_H_
#define PDSERVE_ENGINE_MODEL_SAMPLER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace pdserve {

namespace grammar {
class CompiledGrammar;  // engine/grammar/grammar.h
}  // namespace grammar

// Reasoning control of one sequence (v1.ReasoningControl): when it has spent
// max_tokens tokens inside its reasoning (after start_ids, or from the start
// when starts_inside), end_ids are forced. A grammar applies only outside
// the reasoning.
struct ReasoningControl {
  int32_t max_tokens = 0;  // 0 = no limit
  std::vector<int32_t> start_ids, end_ids;
  bool starts_inside = false;
  bool active() const { return !end_ids.empty(); }
};

// How one sequence picks its next token. The pipeline, in order:
//   1. penalties on the raw logits (vLLM / OpenAI semantics):
//      repetition_penalty r (1 = off) for every token seen in the prompt or
//      the output: logit > 0 ? logit / r : logit * r;
//      frequency_penalty f and presence_penalty p for output tokens:
//      logit -= f * count + p * (count > 0);
//      then logit_bias[id] is added;
//   2. temperature 0: the argmax (ties: lowest id); nothing below applies;
//   3. logits / temperature, softmax;
//   4. top_k (0 = off): keep the k most likely tokens;
//   5. top_p: keep the smallest most-likely prefix whose mass >= top_p;
//   6. min_p (0 = off): drop tokens with p < min_p * p_max;
//   7. renormalise and draw with the uniform SamplingUniform(seed, position)
//      (engine/model/counter_rng.h), position = the tokens before this one.
struct SamplingParams {
  float temperature = 0.0f;       // >= 0; 0 = greedy
  int32_t top_k = 0;              // >= 0; 0 = all tokens
  float top_p = 1.0f;             // (0, 1]
  float min_p = 0.0f;             // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; 1 = off
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  uint64_t seed = 0;              // keys the counter-based draws
  // (token id, bias) pairs added to the logits after the penalties: ids in
  // [0, vocab), biases in [-100, 100] (OpenAI's logit_bias).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Most likely tokens to report with each sampled token, under the raw
  // distribution (as SampledToken::logprob): 0..kMaxTopLogprobs.
  int32_t top_logprobs = 0;
  // Guided decoding: the engine keeps a matcher of this grammar per sequence
  // and masks the logits with its allowed tokens before sampling (null =
  // free).
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  ReasoningControl reasoning;
};

// The most alternatives SamplingParams::top_logprobs may ask for (OpenAI's).
inline constexpr int32_t kMaxTopLogprobs = 20;

// INVALID_ARGUMENT naming the field and value when a parameter is out of its
// range (or NaN).
absl::Status ValidateSamplingParams(const SamplingParams& params);

// Working memory of the filtered modes (top-k / top-p / min-p, penalties):
// vocab-sized buffers. One scratch can serve any number of Samplers used one
// after another (e.g. all sequences of an engine step); it grows on first use
// and is then reused without allocating. Not thread-safe.
class SamplerScratch {
 public:
  SamplerScratch() = default;
  explicit SamplerScratch(int32_t vocab_size) { Reserve(vocab_size); }
  void Reserve(int32_t vocab_size);

 private:
  friend class Sampler;
  std::vector<float> values;  // penalised logits, then their weights
  std::vector<int32_t> ids;   // candidate ids
};

// A token id and its log-probability (natural log).
struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

// The chosen token and its log-probability under the model's distribution
// (log-softmax of the raw logits, before penalties, bias and temperature);
// with params.top_logprobs = k > 0, the k most likely tokens of that same
// distribution in top[0, num_top), most likely first (ties: lowest id).
// Fixed size: no allocation per sample.
struct SampledToken {
  int32_t token = -1;
  float logprob = 0.0f;
  int32_t num_top = 0;
  std::array<TokenLogprob, kMaxTopLogprobs> top;
};

// Per-sequence sampling state: the parameters, the position of the next
// token (its draw is SamplingUniform(params.seed, position): a pure function
// of the two, the same on every platform, so a sequence restarted from
// prompt + generated-so-far draws what it would have drawn straight through)
// and the token history the penalties need (allocated at
// construction, vocab-sized, only when a penalty is on). Greedy and plain
// temperature sampling need no scratch; the filtered modes use the scratch
// passed in, or one the Sampler allocates on first use. After that first
// call Sample does not allocate. Thread-compatible.
class Sampler {
 public:
  // INVALID_ARGUMENT for bad params (see ValidateSamplingParams),
  // vocab_size < 1, or a logit_bias id outside [0, vocab_size).
  static absl::StatusOr<std::unique_ptr<Sampler>> Create(
      const SamplingParams& params, int64_t vocab_size);

  // Marks prompt tokens for the repetition penalty (ids outside the
  // vocabulary are ignored) and moves the position past them. The last
  // `resumed_outputs` ids of `prompt` (clamped to [0, prompt.size()]) are
  // tokens this request generated before it was restarted: they count as
  // output tokens for the frequency and presence penalties, as they did the
  // first time. Call once, before the first Sample.
  void AddPrompt(absl::Span<const int32_t> prompt, int64_t resumed_outputs = 0);

  // Picks the next token from `logits` (vocab_size floats) with the draw of
  // position(), records it in the output history and advances the
  // position. `allowed`, when given, is a bitmask of (vocab_size + 31) / 32
  // words (bit id % 32 of word id / 32): only those
  // tokens can be drawn (their logits unchanged, the others -inf, before the
  // rest of the pipeline); the returned logprobs stay those of the model's
  // distribution. INVALID_ARGUMENT when logits has the wrong size or the
  // mask allows no token.
  absl::StatusOr<SampledToken> Sample(absl::Span<const float> logits,
                                      SamplerScratch* scratch = nullptr,
                                      const uint32_t* allowed = nullptr);

  const SamplingParams& params() const { return params_; }
  int32_t vocab_size() const { return vocab_size_; }
  int64_t output_tokens() const { return output_tokens_; }
  // Position of the next token sampled (prompt + tokens sampled so far).
  int64_t position() const { return position_; }

 private:
  Sampler(const SamplingParams& params, int32_t vocab_size);
  bool HasPenalties() const;
  bool HasFilters() const;
  // Penalties with history to apply, or a logit bias: logits are copied.
  bool AdjustsLogits() const;
  void FillTopLogprobs(absl::Span<const float> logits, float log_z,
                       SampledToken* out) const;
  void ApplyPenalties(float* values) const;
  // Sets the logits of tokens `allowed` does not allow to -inf; false when
  // it allows none.
  bool ApplyMask(const uint32_t* allowed, float* values) const;
  double Uniform() const;  // [0, 1), 53 random bits of position_'s draw
  int32_t DrawPlain(const float* logits);
  int32_t DrawFiltered(SamplerScratch& s);
  void Record(int32_t token);
  void CountOutput(int32_t token);

  SamplingParams params_;
  int32_t vocab_size_;
  int64_t position_ = 0;
  std::unique_ptr<SamplerScratch> own_scratch_;
  // Penalty state (empty when no penalty is on).
  std::vector<int32_t> output_count_;  // [vocab]
  std::vector<uint8_t> in_prompt_;     // [vocab]
  std::vector<int32_t> seen_;          // ids counted or marked, each once
  int64_t output_tokens_ = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_MODEL_SAMPLER_H_
