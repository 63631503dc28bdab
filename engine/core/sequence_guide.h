// Guided decoding of one engine sequence: its grammar matcher (outside the
// reasoning) and its reasoning control (the end-of-reasoning marker forced
// once the budget is spent), both as an allowed-token mask for the sampler;
// and MaskWorker, the thread that fills grammar masks while a step's forward
// pass runs.
#ifndef PDSERVE_ENGINE_CORE_SEQUENCE_GUIDE_H_
#define PDSERVE_ENGINE_CORE_SEQUENCE_GUIDE_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/grammar/grammar.h"
#include "engine/model/sampler.h"

namespace pdserve {

// Thread-compatible: Prepare and Accept on the step thread; FillGrammarMask
// on the mask worker between them.
class SequenceGuide {
 public:
  // Null when `params` has neither a grammar nor a reasoning control.
  // INVALID_ARGUMENT when the grammar's vocabulary is not `vocab_size`.
  static absl::StatusOr<std::unique_ptr<SequenceGuide>> Create(
      const SamplingParams& params, int32_t vocab_size);

  enum class Mode {
    kFree,     // sample without a mask
    kForced,   // mask() allows the one forced token
    kGrammar,  // mask() is the grammar's once FillGrammarMask ran
  };
  // Before a step in which the sequence samples: what its mask will be.
  Mode Prepare();
  // Fills mask() from the grammar (after Prepare returned kGrammar).
  void FillGrammarMask();
  const uint32_t* mask() const { return mask_.data(); }
  // The sampled token: advances the reasoning state and, outside the
  // reasoning, the grammar. *grammar_done: the grammar accepted its end.
  // INVALID_ARGUMENT when the grammar refuses the token.
  absl::Status Accept(int32_t token, bool* grammar_done);
  // Replays tokens this request generated before it was restarted (resume
  // by recompute): Prepare + Accept for each, so the reasoning budget and
  // the grammar stand where they stood. INVALID_ARGUMENT naming the token
  // when one is not allowed there.
  absl::Status Replay(absl::Span<const int32_t> outputs);

  bool in_reasoning() const { return in_reasoning_; }

 private:
  SequenceGuide(const SamplingParams& params, int32_t vocab_size);
  bool RecentEndsWith(const std::vector<int32_t>& ids) const;

  std::unique_ptr<grammar::GrammarMatcher> matcher_;
  ReasoningControl reasoning_;
  int32_t vocab_size_;
  std::vector<uint32_t> mask_;
  std::vector<int32_t> recent_;  // the last few tokens (marker matching)
  size_t recent_keep_ = 0;
  Mode mode_ = Mode::kFree;
  bool in_reasoning_ = false, reasoning_done_ = false;
  int32_t reasoning_tokens_ = 0;
  int32_t forced_pos_ = -1;  // index into end_ids while forcing
};

// One thread that fills the grammar masks of a step's sequences while the
// step's forward pass runs. Start, then Wait, from one thread.
class MaskWorker {
 public:
  MaskWorker();
  ~MaskWorker();
  MaskWorker(const MaskWorker&) = delete;
  MaskWorker& operator=(const MaskWorker&) = delete;

  // `guides` must stay valid until Wait returns.
  void Start(absl::Span<SequenceGuide* const> guides);
  void Wait();

 private:
  void Loop();
  std::mutex mu_;
  std::condition_variable cv_;
  absl::Span<SequenceGuide* const> jobs_;
  bool pending_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace pdserve

#endif  // PDSERVE_ENGINE_CORE_SEQUENCE_GUIDE_H_
