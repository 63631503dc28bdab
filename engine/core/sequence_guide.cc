#include "engine/core/sequence_guide.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pdserve {

absl::StatusOr<std::unique_ptr<SequenceGuide>> SequenceGuide::Create(
    const SamplingParams& params, int32_t vocab_size) {
  if (params.grammar == nullptr && !params.reasoning.active()) return nullptr;
  for (int32_t id : params.reasoning.end_ids) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reasoning end token ", id, " is outside the vocabulary [0, ",
          vocab_size, ")"));
    }
  }
  std::unique_ptr<SequenceGuide> g(new SequenceGuide(params, vocab_size));
  if (g->matcher_ != nullptr && g->matcher_->vocab_size() != vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the grammar was compiled for ", g->matcher_->vocab_size(),
        " tokens; the model has ", vocab_size));
  }
  return g;
}

SequenceGuide::SequenceGuide(const SamplingParams& params, int32_t vocab_size)
    : reasoning_(params.reasoning),
      vocab_size_(vocab_size),
      mask_(static_cast<size_t>(grammar::MaskWords(vocab_size))) {
  if (params.grammar != nullptr) {
    matcher_ = std::make_unique<grammar::GrammarMatcher>(params.grammar);
  }
  in_reasoning_ = reasoning_.active() && reasoning_.starts_inside;
  recent_keep_ = std::max(reasoning_.start_ids.size(), reasoning_.end_ids.size());
  recent_.reserve(recent_keep_ + 1);
}

SequenceGuide::Mode SequenceGuide::Prepare() {
  if (in_reasoning_ && forced_pos_ < 0 && reasoning_.max_tokens > 0 &&
      reasoning_tokens_ >= reasoning_.max_tokens) {
    forced_pos_ = 0;  // the budget is spent: close the reasoning
  }
  if (forced_pos_ >= 0) {
    std::fill(mask_.begin(), mask_.end(), 0u);
    const int32_t id = reasoning_.end_ids[static_cast<size_t>(forced_pos_)];
    mask_[static_cast<size_t>(id >> 5)] = 1u << (id & 31);
    mode_ = Mode::kForced;
  } else if (in_reasoning_ || matcher_ == nullptr) {
    mode_ = Mode::kFree;
  } else {
    mode_ = Mode::kGrammar;
  }
  return mode_;
}

void SequenceGuide::FillGrammarMask() {
  matcher_->FillMask(absl::MakeSpan(mask_));
}

bool SequenceGuide::RecentEndsWith(const std::vector<int32_t>& ids) const {
  return !ids.empty() && recent_.size() >= ids.size() &&
         std::equal(ids.begin(), ids.end(), recent_.end() - ids.size());
}

absl::Status SequenceGuide::Accept(int32_t token, bool* grammar_done) {
  *grammar_done = false;
  const Mode mode = mode_;
  mode_ = Mode::kFree;
  if (recent_keep_ > 0) {
    if (recent_.size() == recent_keep_) recent_.erase(recent_.begin());
    recent_.push_back(token);
  }
  if (forced_pos_ >= 0 &&
      ++forced_pos_ == static_cast<int32_t>(reasoning_.end_ids.size())) {
    forced_pos_ = -1;
  }
  if (in_reasoning_) {
    ++reasoning_tokens_;
    if (RecentEndsWith(reasoning_.end_ids)) {
      in_reasoning_ = false;
      reasoning_done_ = true;
      forced_pos_ = -1;
    }
    return absl::OkStatus();
  }
  if (!reasoning_done_ && RecentEndsWith(reasoning_.start_ids)) {
    in_reasoning_ = true;
    reasoning_tokens_ = 0;
    return absl::OkStatus();
  }
  if (matcher_ == nullptr || mode != Mode::kGrammar) return absl::OkStatus();
  if (absl::Status s = matcher_->Accept(token); !s.ok()) return s;
  *grammar_done = matcher_->terminated();
  return absl::OkStatus();
}

absl::Status SequenceGuide::Replay(absl::Span<const int32_t> outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Mode mode = Prepare();
    const int32_t token = outputs[i];
    if (mode == Mode::kForced &&
        token != reasoning_.end_ids[static_cast<size_t>(forced_pos_)]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resumed output ", i, " is token ", token, " but the end of the "
          "reasoning forces token ",
          reasoning_.end_ids[static_cast<size_t>(forced_pos_)]));
    }
    bool done = false;
    if (absl::Status s = Accept(token, &done); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resumed output ", i, " (token ", token, "): ", s.message()));
    }
  }
  return absl::OkStatus();
}

MaskWorker::MaskWorker() : thread_([this] { Loop(); }) {}

MaskWorker::~MaskWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void MaskWorker::Start(absl::Span<SequenceGuide* const> guides) {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_ = guides;
  pending_ = true;
  cv_.notify_all();
}

void MaskWorker::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !pending_; });
}

void MaskWorker::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return pending_ || stop_; });
    if (stop_) return;
    const absl::Span<SequenceGuide* const> jobs = jobs_;
    lock.unlock();
    for (SequenceGuide* g : jobs) g->FillGrammarMask();
    lock.lock();
    pending_ = false;
    cv_.notify_all();
  }
}

}  // namespace pdserve
