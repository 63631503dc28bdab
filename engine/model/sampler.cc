#include "engine/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/model/counter_rng.h"
#include "kernels/ops.h"

namespace pdserve {
namespace {

absl::Status OutOfRange(const char* field, double value, const char* range) {
  return absl::InvalidArgumentError(
      absl::StrCat("sampling parameter ", field, " = ", value,
                   " is outside its range ", range));
}

// Candidates are ordered by value descending, ties by id ascending: a strict
// total order, so partial sorts are deterministic.
struct ByValueDesc {
  const float* v;
  bool operator()(int32_t a, int32_t b) const {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
  }
};

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || std::isinf(p.temperature)) {
    return OutOfRange("temperature", p.temperature, "[0, inf) (0 = greedy)");
  }
  if (p.top_k < 0) return OutOfRange("top_k", p.top_k, "[0, vocab] (0 = off)");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return OutOfRange("top_p", p.top_p, "(0, 1]");
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return OutOfRange("min_p", p.min_p, "[0, 1]");
  }
  if (!(p.repetition_penalty > 0.0f) || std::isinf(p.repetition_penalty)) {
    return OutOfRange("repetition_penalty", p.repetition_penalty,
                      "(0, inf) (1 = off)");
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return OutOfRange("presence_penalty", p.presence_penalty, "[-2, 2]");
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return OutOfRange("frequency_penalty", p.frequency_penalty, "[-2, 2]");
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling parameter logit_bias[", id, "] = ", bias,
                       " is outside its range [-100, 100]"));
    }
  }
  if (p.top_logprobs < 0 || p.top_logprobs > kMaxTopLogprobs) {
    return OutOfRange("top_logprobs", p.top_logprobs, "[0, 20]");
  }
  return absl::OkStatus();
}

void SamplerScratch::Reserve(int32_t vocab_size) {
  if (static_cast<int32_t>(values.size()) < vocab_size) {
    values.resize(vocab_size);
    ids.resize(vocab_size);
  }
}

absl::StatusOr<std::unique_ptr<Sampler>> Sampler::Create(
    const SamplingParams& params, int64_t vocab_size) {
  if (absl::Status s = ValidateSamplingParams(params); !s.ok()) return s;
  if (vocab_size < 1 || vocab_size > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler vocab_size must be in [1, 2^31), got ",
                     vocab_size));
  }
  for (const auto& [id, bias] : params.logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling parameter logit_bias names token ", id,
                       ", outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  return std::unique_ptr<Sampler>(
      new Sampler(params, static_cast<int32_t>(vocab_size)));
}

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size)
    : params_(params), vocab_size_(vocab_size) {
  if (HasPenalties()) {
    output_count_.assign(vocab_size_, 0);
    in_prompt_.assign(vocab_size_, 0);
    seen_.reserve(vocab_size_);
  }
}

bool Sampler::HasPenalties() const {
  return params_.repetition_penalty != 1.0f ||
         params_.presence_penalty != 0.0f ||
         params_.frequency_penalty != 0.0f;
}

bool Sampler::AdjustsLogits() const {
  return (HasPenalties() && !seen_.empty()) || !params_.logit_bias.empty();
}

bool Sampler::HasFilters() const {
  return (params_.top_k > 0 && params_.top_k < vocab_size_) ||
         params_.top_p < 1.0f || params_.min_p > 0.0f;
}

void Sampler::AddPrompt(absl::Span<const int32_t> prompt,
                        int64_t resumed_outputs) {
  position_ += static_cast<int64_t>(prompt.size());
  if (!HasPenalties()) return;
  const size_t outputs = static_cast<size_t>(std::clamp<int64_t>(
      resumed_outputs, 0, static_cast<int64_t>(prompt.size())));
  const size_t prompt_len = prompt.size() - outputs;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const int32_t t = prompt[i];
    if (t < 0 || t >= vocab_size_) continue;
    if (i >= prompt_len) {
      CountOutput(t);
      continue;
    }
    if (in_prompt_[t]) continue;
    if (output_count_[t] == 0) seen_.push_back(t);
    in_prompt_[t] = 1;
  }
}

void Sampler::CountOutput(int32_t token) {
  if (output_count_[token] == 0 && !in_prompt_[token]) seen_.push_back(token);
  ++output_count_[token];
}

void Sampler::Record(int32_t token) {
  ++output_tokens_;
  ++position_;
  if (HasPenalties()) CountOutput(token);
}

void Sampler::ApplyPenalties(float* values) const {
  const float r = params_.repetition_penalty;
  for (int32_t t : seen_) {
    float v = values[t];
    if (r != 1.0f) v = v > 0.0f ? v / r : v * r;
    const int32_t count = output_count_[t];
    if (count > 0) {
      v -= params_.frequency_penalty * static_cast<float>(count) +
           params_.presence_penalty;
    }
    values[t] = v;
  }
  for (const auto& [id, bias] : params_.logit_bias) values[id] += bias;
}

// One pass over the vocabulary keeping the k best in a sorted array (k <= 20:
// an insertion only when a logit beats the current k-th).
void Sampler::FillTopLogprobs(absl::Span<const float> logits, float log_z,
                              SampledToken* out) const {
  const int32_t k = std::min(params_.top_logprobs, vocab_size_);
  out->num_top = k;
  if (k == 0) return;
  TokenLogprob* top = out->top.data();
  int32_t n = 0;
  for (int32_t i = 0; i < vocab_size_; ++i) {
    const float v = logits[i];
    if (n == k && !(v > top[k - 1].logprob)) continue;
    int32_t j = n < k ? n++ : k - 1;
    while (j > 0 && top[j - 1].logprob < v) {
      top[j] = top[j - 1];
      --j;
    }
    top[j] = {i, v};
  }
  for (int32_t j = 0; j < k; ++j) top[j].logprob -= log_z;
}

double Sampler::Uniform() const {
  return SamplingUniform(params_.seed, static_cast<uint64_t>(position_));
}

// Temperature sampling over the whole vocabulary, no buffer: one pass for
// the normaliser, one to find the drawn token (ids in ascending order).
int32_t Sampler::DrawPlain(const float* logits) {
  const float inv_t = 1.0f / params_.temperature;
  float max = logits[0];
  for (int32_t i = 1; i < vocab_size_; ++i) max = std::max(max, logits[i]);
  double total = 0.0;
  for (int32_t i = 0; i < vocab_size_; ++i) {
    total += std::exp((logits[i] - max) * inv_t);
  }
  const double target = Uniform() * total;
  double acc = 0.0;
  int32_t last = 0;  // the last token with any mass (masked ones have none)
  for (int32_t i = 0; i < vocab_size_; ++i) {
    const double w = std::exp((logits[i] - max) * inv_t);
    if (w > 0.0) last = i;
    acc += w;
    if (acc > target) return i;
  }
  return last;  // rounding: the mass ran out at the end
}

// s.values holds the unnormalised probabilities exp(z - max(z)) of the
// penalised, tempered logits z (same order as z, computed once).
int32_t Sampler::DrawFiltered(SamplerScratch& s) {
  const float* w = s.values.data();
  int32_t* ids = s.ids.data();
  int32_t n = vocab_size_;
  for (int32_t i = 0; i < n; ++i) ids[i] = i;
  const ByValueDesc order{w};
  bool sorted = false;
  if (params_.top_k > 0 && params_.top_k < n) {
    std::nth_element(ids, ids + params_.top_k, ids + n, order);
    n = params_.top_k;
    std::sort(ids, ids + n, order);
    sorted = true;
  }
  if (params_.top_p < 1.0f) {
    double total = 0.0;
    for (int32_t i = 0; i < n; ++i) total += w[ids[i]];
    const double need = params_.top_p * total;
    // Sort a growing prefix until it holds the needed mass (usually a few
    // dozen tokens), instead of sorting the whole vocabulary.
    int32_t k = sorted ? n : std::min<int32_t>(n, 64);
    for (;;) {
      if (!sorted) {
        if (k < n) std::nth_element(ids, ids + k, ids + n, order);
        std::sort(ids, ids + k, order);
      }
      double acc = 0.0;
      int32_t keep = 0;
      while (keep < k && acc < need) acc += w[ids[keep++]];
      if (acc >= need || k == n) {
        n = std::max<int32_t>(keep, 1);
        sorted = true;
        break;
      }
      k = static_cast<int32_t>(std::min<int64_t>(n, int64_t{k} * 4));
    }
  }
  if (params_.min_p > 0.0f) {
    // p_i >= min_p * p_max  <=>  w_i >= min_p (w of the max is 1).
    int32_t kept = 0;
    for (int32_t i = 0; i < n; ++i) {
      if (w[ids[i]] >= params_.min_p) ids[kept++] = ids[i];
    }
    n = std::max<int32_t>(kept, 1);  // the max itself always passes
  }
  double total = 0.0;
  for (int32_t i = 0; i < n; ++i) total += w[ids[i]];
  const double target = Uniform() * total;
  double acc = 0.0;
  int32_t last = ids[0];  // the last candidate with any mass
  for (int32_t i = 0; i < n; ++i) {
    if (w[ids[i]] > 0.0f) last = ids[i];
    acc += w[ids[i]];
    if (acc > target) return ids[i];
  }
  return last;
}

bool Sampler::ApplyMask(const uint32_t* allowed, float* values) const {
  const int32_t words = (vocab_size_ + 31) / 32;
  bool any = false;
  for (int32_t w = 0; w < words; ++w) {
    const uint32_t bits = allowed[w];
    const int32_t base = w * 32;
    const int32_t n = std::min<int32_t>(32, vocab_size_ - base);
    if (n == 32 && bits == 0xFFFFFFFFu) {
      any = true;
      continue;
    }
    for (int32_t b = 0; b < n; ++b) {
      if (!((bits >> b) & 1u)) {
        values[base + b] = -std::numeric_limits<float>::infinity();
      } else {
        any = true;
      }
    }
  }
  return any;
}

absl::StatusOr<SampledToken> Sampler::Sample(absl::Span<const float> logits,
                                             SamplerScratch* scratch,
                                             const uint32_t* allowed) {
  if (static_cast<int64_t>(logits.size()) != vocab_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler got ", logits.size(), " logits for a vocabulary of ",
                     vocab_size_));
  }
  // Log-softmax base of the raw logits (for the returned logprob).
  const float log_z = LogSumExp(logits.data(), vocab_size_);

  int32_t token = 0;
  const bool penalties = AdjustsLogits() || allowed != nullptr;
  if (!penalties && params_.temperature == 0.0f) {
    token = static_cast<int32_t>(ArgMax(logits.data(), vocab_size_));
  } else if (!penalties && !HasFilters()) {
    token = DrawPlain(logits.data());
  } else {
    if (scratch == nullptr) {
      if (own_scratch_ == nullptr) {
        own_scratch_ = std::make_unique<SamplerScratch>();
      }
      scratch = own_scratch_.get();
    }
    scratch->Reserve(vocab_size_);
    float* values = scratch->values.data();
    std::copy(logits.begin(), logits.end(), values);
    ApplyPenalties(values);
    if (allowed != nullptr && !ApplyMask(allowed, values)) {
      return absl::InvalidArgumentError(
          "the grammar allows no token at this step");
    }
    if (params_.temperature == 0.0f) {
      token = static_cast<int32_t>(ArgMax(values, vocab_size_));
    } else if (!HasFilters()) {
      token = DrawPlain(values);
    } else {
      const float inv_t = 1.0f / params_.temperature;
      float max = values[0];
      for (int32_t i = 1; i < vocab_size_; ++i) max = std::max(max, values[i]);
      for (int32_t i = 0; i < vocab_size_; ++i) {
        values[i] = std::exp((values[i] - max) * inv_t);
      }
      token = DrawFiltered(*scratch);
    }
  }
  Record(token);
  SampledToken out;
  out.token = token;
  out.logprob = logits[token] - log_z;
  FillTopLogprobs(logits, log_z, &out);
  return out;
}

}  // namespace pdserve
