#include "engine/core/engine_core.h"
#include "engine/core/engine_core_impl.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/backend/backend_loader.h"
#include "engine/backend/forward_backend.h"
#include "engine/kv/sequence_state.h"
#include "engine/model/forward.h"
#include "engine/core/sequence_guide.h"
#include "engine/model/sampler.h"
#include "kernels/thread_pool.h"

namespace pdserve {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
  }
  return "unknown";
}

absl::Status EngineCore::Impl::AddSequence(
    SequenceId id, absl::Span<const int32_t> prompt, int64_t max_seq_len,
    const SamplingParams& params, absl::Span<const int32_t> stop_token_ids,
    int64_t max_new_tokens, const LedgerPages* ledger,
    int64_t resumed_outputs, absl::Span<const SequenceImage> images) {
  if (seqs_.contains(id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("sequence ", id, " already exists"));
  }
  if (prompt.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", id, ": empty prompt"));
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", id, ": prompt token ", prompt[i], " at index ", i,
          " is outside the vocabulary [0, ", vocab_, ")"));
    }
  }
  for (int32_t t : stop_token_ids) {
    if (t < 0 || t >= vocab_) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", id, ": stop token ", t,
                       " is outside the vocabulary [0, ", vocab_, ")"));
    }
  }
  if (absl::Status s = CheckMaxSeqLen(max_seq_len, config().max_context,
                                      geometry().total_tokens);
      !s.ok()) {
    return s;
  }
  if (max_seq_len > options_.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_seq_len=", max_seq_len, " exceeds the engine's sequence capacity "
        "of ", options_.max_seq_len, " tokens (--max-seq-len)"));
  }
  if (absl::Status s =
          CheckPromptFits(static_cast<int64_t>(prompt.size()), max_seq_len);
      !s.ok()) {
    return s;
  }
  if (max_new_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", id, ": max_new_tokens must be positive, got ",
                     max_new_tokens));
  }
  if (resumed_outputs < 0 ||
      resumed_outputs >= static_cast<int64_t>(prompt.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", id, ": resumed_outputs ", resumed_outputs,
        " must be in [0, ", prompt.size(), ") for a prompt of ", prompt.size(),
        " tokens (at least one token of the original prompt)"));
  }
  if (static_cast<int64_t>(seqs_.size()) >= 2 * options_.max_sequences) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "engine holds ", seqs_.size(),
        " sequences (finished ones must be released); the limit is ",
        2 * options_.max_sequences));
  }
  absl::StatusOr<std::unique_ptr<Sampler>> sampler =
      Sampler::Create(params, vocab_);
  if (!sampler.ok()) return sampler.status();
  absl::StatusOr<std::unique_ptr<SequenceGuide>> guide =
      SequenceGuide::Create(params, static_cast<int32_t>(vocab_));
  if (!guide.ok()) return guide.status();
  if (*guide != nullptr && resumed_outputs > 0) {
    if (absl::Status s = (*guide)->Replay(prompt.last(resumed_outputs));
        !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", id, ": ", s.message()));
    }
  }
  if (!images.empty() && !config().vision.present()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", id, " has ", images.size(), " images but model ",
        config().name, " has no vision tower"));
  }
  if (!images.empty() && !backend_->HasVisionEncoder()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sequence ", id, " has images but the ", description_,
        " backend has no vision encoder"));
  }
  if (!images.empty() && ledger != nullptr && !ledger->prefix_pages.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", id, " has images: it takes no cached prefix (got ",
        ledger->prefix_pages.size(), " pages)"));
  }
  absl::StatusOr<SequenceState> state = SequenceState::Create(max_seq_len);
  if (!state.ok()) return state.status();

  auto seq = std::make_unique<EngineSequence>(std::move(*state));
  seq->id = id;
  seq->tokens.reserve(static_cast<size_t>(max_seq_len + 1));
  seq->tokens.assign(prompt.begin(), prompt.end());
  seq->prompt_len = static_cast<int64_t>(prompt.size());
  if (!images.empty()) {
    if (absl::Status s = PrepareImages(*seq, images); !s.ok()) return s;
    seq->multimodal = true;
  }
  if (absl::Status s = pool_->Add(id, max_seq_len); !s.ok()) return s;
  seq->sampler = std::move(*sampler);
  seq->sampler->AddPrompt(prompt, resumed_outputs);
  seq->guide = std::move(*guide);
  if (seq->guide != nullptr && mask_worker_ == nullptr) {
    mask_worker_ = std::make_unique<MaskWorker>();
  }
  seq->stop_ids.assign(stop_token_ids.begin(), stop_token_ids.end());
  seq->max_new_tokens = max_new_tokens;
  seq->device_samplable = params.repetition_penalty == 1.0f &&
                          params.presence_penalty == 0.0f &&
                          params.frequency_penalty == 0.0f &&
                          params.logit_bias.empty() &&
                          params.top_logprobs == 0 && seq->guide == nullptr;
  seq->device_params.temperature = params.temperature;
  seq->device_params.top_k = params.top_k;
  seq->device_params.top_p = params.top_p;
  seq->device_params.min_p = params.min_p;
  seq->device_params.seed = params.seed;
  // An image prompt's placeholder ids say nothing of the image: it neither
  // matches nor fills the token-keyed prefix index.
  absl::Status attached =
      ledger != nullptr ? AssignLedgerPages(*seq, *ledger)
      : seq->multimodal ? absl::OkStatus()
                        : AttachCachedPrefix(*seq);
  if (!attached.ok()) {
    (void)pool_->Remove(id);
    return attached;
  }
  images_ += static_cast<int64_t>(seq->images.size());
  for (const EngineSequence::PromptImage& img : seq->images) {
    image_cache_hits_ += img.embedding != nullptr ? 1 : 0;
  }
  seqs_.emplace(id, std::move(seq));
  ++running_;
  return absl::OkStatus();
}

absl::Status EngineCore::Impl::AssignLedgerPages(EngineSequence& seq,
                                                 const LedgerPages& ledger) {
  if (pool_->prefix_cache_enabled()) prefix_query_tokens_ += seq.prompt_len;
  const int64_t max_pages = (seq.prompt_len - 1) / geometry().page_size;
  if (static_cast<int64_t>(ledger.prefix_pages.size()) > max_pages) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", seq.id, ": a prefix of ", ledger.prefix_pages.size(),
        " KV pages leaves no prompt token to compute (at most ", max_pages,
        ")"));
  }
  absl::StatusOr<int64_t> cached = pool_->AssignPrefix(
      seq.id, seq.tokens, ledger.prefix_pages, ledger.index_tokens);
  if (!cached.ok()) return cached.status();
  if (absl::Status s = pool_->AssignPages(seq.id, ledger.pages); !s.ok()) {
    return s;
  }
  if (*cached == 0) return absl::OkStatus();
  if (absl::Status s = seq.state.Advance(*cached); !s.ok()) return s;
  seq.cached_skip = *cached;
  prefix_hit_tokens_ += *cached;
  return absl::OkStatus();
}

absl::Status EngineCore::Impl::AttachCachedPrefix(EngineSequence& seq) {
  if (!pool_->prefix_cache_enabled()) return absl::OkStatus();
  prefix_query_tokens_ += seq.prompt_len;
  // The last prompt token is always computed: it yields the first logits.
  const int64_t max_pages = (seq.prompt_len - 1) / geometry().page_size;
  absl::StatusOr<int64_t> cached =
      pool_->AttachPrefix(seq.id, seq.tokens, max_pages);
  if (!cached.ok()) return cached.status();
  if (*cached == 0) return absl::OkStatus();
  if (absl::Status s = seq.state.Advance(*cached); !s.ok()) return s;
  seq.cached_skip = *cached;
  prefix_hit_tokens_ += *cached;
  return absl::OkStatus();
}

absl::Status EngineCore::Impl::ValidatePlan(
    absl::Span<const StepPlanEntry> plan) {
  ++steps_;
  int64_t total_tokens = 0;
  int64_t pages_needed = 0;
  for (const StepPlanEntry& e : plan) {
    auto it = seqs_.find(e.id);
    if (it == seqs_.end()) {
      return absl::NotFoundError(
          absl::StrCat("step plan names unknown sequence ", e.id));
    }
    EngineSequence& seq = *it->second;
    if (seq.plan_stamp == steps_) {
      return absl::InvalidArgumentError(
          absl::StrCat("step plan lists sequence ", e.id, " twice"));
    }
    seq.plan_stamp = steps_;
    if (e.num_tokens <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("step plan gives sequence ", e.id, " ", e.num_tokens,
                       " tokens; must be >= 1"));
    }
    if (seq.finish != FinishReason::kNone) continue;  // reported, not run
    if (e.num_tokens > seq.pending()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step plan gives sequence ", e.id, " ", e.num_tokens,
          " tokens at position ", seq.state.next_pos() - seq.cached_skip,
          " but only ", seq.pending(), " are pending (prompt ", seq.prompt_len,
          ", generated ", seq.generated, ")"));
    }
    // Cached prefix tokens cost nothing: only computed ones count.
    const int64_t compute =
        std::max<int64_t>(0, e.num_tokens - seq.cached_skip);
    total_tokens += compute;
    pages_needed += pool_->PagesNeeded(e.id, seq.state.next_pos() + compute);
  }
  if (total_tokens > options_.max_step_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step plan holds ", total_tokens,
        " tokens to compute; the engine's limit is max_step_tokens=",
        options_.max_step_tokens));
  }
  // Each running entry needs a logits row; running sequences are at most
  // max_sequences and each takes >= 1 token, so rows <= max_rows_ holds.
  const int64_t free_pages = pool_->Stats().free_pages;
  if (pages_needed > free_pages) {
    return absl::ResourceExhaustedError(
        absl::StrCat("step needs ", pages_needed, " more KV pages; ",
                     free_pages, " are free"));
  }
  return absl::OkStatus();
}

absl::Status EngineCore::Impl::Step(absl::Span<const StepPlanEntry> plan,
                                    StepResult* result) {
  const int64_t t0 = options_.now_ns();
  if (absl::Status s = ValidatePlan(plan); !s.ok()) return s;
  encode_ns_ = 0;
  step_images_encoded_ = 0;

  result->sequences.resize(plan.size());
  result->tokens_processed = 0;
  spans_.clear();
  span_seq_.clear();
  // Device sampling when the backend offers it and every sequence that
  // samples in this step needs no penalty.
  bool on_device = backend_->SamplesOnDevice();
  mask_jobs_.clear();
  for (size_t i = 0; i < plan.size(); ++i) {
    EngineSequence& seq = *seqs_.find(plan[i].id)->second;
    SequenceStepResult& out = result->sequences[i];
    out = SequenceStepResult{};
    out.id = seq.id;
    out.finish = seq.finish;
    out.next_pos = seq.state.next_pos() - seq.cached_skip;
    if (seq.finish != FinishReason::kNone) continue;
    // Cached prompt tokens the plan counts are consumed first, for free.
    const int64_t skipped =
        std::min<int64_t>(seq.cached_skip, plan[i].num_tokens);
    seq.cached_skip -= skipped;
    out.next_pos = seq.state.next_pos() - seq.cached_skip;
    if (skipped == plan[i].num_tokens) continue;  // nothing to compute
    const int64_t start = seq.state.next_pos();
    const int64_t end = start + plan[i].num_tokens - skipped;
    // Validated above: pages are free and end <= tokens.size() <= capacity.
    if (absl::Status s = pool_->Reserve(seq.id, end); !s.ok()) return s;
    SequenceSpan span;
    span.tokens = absl::MakeConstSpan(seq.tokens).subspan(start, end - start);
    span.start_pos = start;
    span.page_table = pool_->PageTable(seq.id);
    span.rope_delta = seq.state.rope_delta();
    span.linear_state = pool_->LinearState(seq.id);  // hybrid models
    span.state_slot = pool_->StateSlot(seq.id);
    if (seq.has_images() && start < seq.prompt_len) {
      if (absl::Status s = ImageSpan(seq, start, end, span); !s.ok()) {
        return s;
      }
    }
    if (end == static_cast<int64_t>(seq.tokens.size()) &&
        !seq.device_samplable) {
      on_device = false;  // samples this step, with penalties
    }
    seq.guide_mode = SequenceGuide::Mode::kFree;
    if (seq.guide != nullptr && end == static_cast<int64_t>(seq.tokens.size())) {
      seq.guide_mode = seq.guide->Prepare();
      if (seq.guide_mode == SequenceGuide::Mode::kGrammar) {
        mask_jobs_.push_back(seq.guide.get());
      }
    }
    spans_.push_back(span);
    span_seq_.push_back(&seq);
  }

  ForwardStats fstats;
  const int64_t t1 = options_.now_ns();
  // The grammar masks of this step's samples are filled while it runs.
  if (!mask_jobs_.empty()) mask_worker_->Start(mask_jobs_);
  if (!spans_.empty()) {
    absl::Status s = Forward(&on_device, &fstats);
    if (!mask_jobs_.empty()) mask_worker_->Wait();
    if (!s.ok()) return s;
    ++forward_steps_;
    last_step_on_device_ = on_device;
  }
  const int64_t t2 = options_.now_ns();

  // Bookkeeping per span, then sampling of every sequence whose pending
  // tokens are all processed (end of prompt, or a decode), spread over the
  // threads (each sequence has its own Sampler; one scratch per thread).
  to_sample_.clear();
  size_t span_index = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    SequenceStepResult& out = result->sequences[i];
    if (span_index >= span_seq_.size() ||
        span_seq_[span_index]->id != plan[i].id) {
      continue;  // finished before this step
    }
    EngineSequence& seq = *span_seq_[span_index];
    const int64_t n = spans_[span_index].size();
    (void)seq.state.Advance(n);  // fits: n <= available <= remaining
    (void)pool_->MarkWritten(seq.id, seq.state.next_pos());
    if (!seq.multimodal) {
      pool_->IndexWritten(seq.id, seq.tokens);  // no-op without a prefix cache
    }
    if (seq.has_images() && seq.state.next_pos() >= seq.prompt_len) {
      ReleaseImages(seq);
    }
    seq.logits_step = steps_;
    seq.logits_row = static_cast<int64_t>(span_index);
    out.tokens_processed = static_cast<int32_t>(n);
    out.next_pos = seq.state.next_pos() - seq.cached_skip;
    result->tokens_processed += n;
    if (seq.available() == 0) {
      to_sample_.push_back(
          {static_cast<int32_t>(span_index), static_cast<int32_t>(i)});
    }
    ++span_index;
  }
  if (on_device) {
    for (const SampleItem& item : to_sample_) {
      Apply(*span_seq_[item.span], device_tokens_[item.span],
            result->sequences[item.plan_index]);
    }
  } else {
    SampleAll();
    for (size_t k = 0; k < to_sample_.size(); ++k) {
      if (!sampled_[k].ok()) return sampled_[k].status();
      Apply(*span_seq_[to_sample_[k].span], *sampled_[k],
            result->sequences[to_sample_[k].plan_index]);
    }
  }
  const int64_t t3 = options_.now_ns();

  tokens_processed_ += result->tokens_processed;
  result->forward_ns = t2 - t1;
  result->sample_ns = t3 - t2;
  result->total_ns = t3 - t0;
  result->weight_bytes_read = fstats.weight_bytes_read;
  result->kv_bytes_read = fstats.kv_bytes_read;
  result->kv_bytes_written = fstats.kv_bytes_written;
  result->flops = fstats.flops;
  result->encode_ns = encode_ns_;
  result->images_encoded = step_images_encoded_;
  return absl::OkStatus();
}

absl::Status EngineCore::Impl::Forward(bool* on_device, ForwardStats* stats) {
  if (*on_device) {
    const size_t n = spans_.size();
    for (size_t k = 0; k < n; ++k) {
      const EngineSequence& seq = *span_seq_[k];
      device_params_[k] = seq.device_params;
      // The draw's counter is the sampled token's position (the host
      // Sampler's too), so a restarted sequence draws the same numbers.
      device_params_[k].step = static_cast<uint64_t>(seq.sampler->position());
    }
    absl::Status s = backend_->RunAndSample(
        spans_, absl::MakeConstSpan(device_params_.data(), n),
        absl::MakeSpan(device_tokens_.data(), n), stats);
    if (s.ok()) {
      for (size_t k = 0; k < n; ++k) {
        const int32_t t = device_tokens_[k].token;
        if (t < 0 || t >= vocab_) {
          return absl::InternalError(
              absl::StrCat(description_, " sampled token ", t, " for sequence ",
                           span_seq_[k]->id, ", outside [0, ", vocab_, ")"));
        }
      }
      return absl::OkStatus();
    }
    if (s.code() != absl::StatusCode::kUnimplemented) return s;
    *on_device = false;  // nothing ran: the host samples this step
  }
  const int64_t rows = ForwardPass::LogitRows(spans_);
  return backend_->Run(spans_, absl::MakeSpan(logits_.get(), rows * vocab_),
                       stats);
}

void EngineCore::Impl::SampleAll() {
  const int64_t n = static_cast<int64_t>(to_sample_.size());
  if (n == 0) return;
  auto sample = [this](int64_t k, int thread) {
    const EngineSequence& seq = *span_seq_[to_sample_[k].span];
    const uint32_t* mask = seq.guide_mode != SequenceGuide::Mode::kFree
                               ? seq.guide->mask()
                               : nullptr;
    sampled_[k] = seq.sampler->Sample(
        absl::MakeConstSpan(logits_.get() + to_sample_[k].span * vocab_,
                            vocab_),
        &scratch_[thread], mask);
  };
  if (n == 1 || threads_->num_threads() == 1) {
    for (int64_t k = 0; k < n; ++k) sample(k, 0);
    return;
  }
  const int num_threads = threads_->num_threads();
  threads_->RunOnAll([&](int t) {
    for (int64_t k = t; k < n; k += num_threads) sample(k, t);
  });
}

void EngineCore::Impl::Apply(EngineSequence& seq, const SampledToken& sampled,
                             SequenceStepResult& out) {
  const int32_t token = sampled.token;
  out.has_token = true;
  out.token = token;
  out.logprob = sampled.logprob;
  out.num_top = sampled.num_top;
  std::copy_n(sampled.top.begin(), sampled.num_top, out.top.begin());
  seq.tokens.push_back(token);
  ++seq.generated;
  bool grammar_done = false;
  if (seq.guide != nullptr) {
    // A refused token cannot happen with the mask applied; if it ever
    // does, the sequence ends there rather than leave its grammar.
    if (!seq.guide->Accept(token, &grammar_done).ok()) grammar_done = true;
  }
  if (grammar_done ||
      std::find(seq.stop_ids.begin(), seq.stop_ids.end(), token) !=
          seq.stop_ids.end()) {
    Finish(seq, FinishReason::kStop);
  } else if (seq.generated >= seq.max_new_tokens || seq.state.full()) {
    // Full: the token cannot be fed back, a decode step would run at
    // position == max_seq_len (CheckDecodeCapacity).
    Finish(seq, FinishReason::kLength);
  }
  out.finish = seq.finish;
}

void EngineCore::Impl::Finish(EngineSequence& seq, FinishReason reason) {
  seq.finish = reason;
  if (seq.export_kv && reason == FinishReason::kLength) ExportFinished(seq);
  (void)pool_->Remove(seq.id);  // pages back at once
  --running_;
  ++finished_;
}

absl::Status EngineCore::Impl::Release(SequenceId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("cannot release unknown sequence ", id));
  }
  if (it->second->finish == FinishReason::kNone) {
    if (absl::Status s = pool_->Remove(id); !s.ok()) return s;
    --running_;
  } else {
    --finished_;
  }
  seqs_.erase(it);
  return absl::OkStatus();
}

EngineStats EngineCore::Impl::Stats() const {
  EngineStats s;
  s.pool = pool_->Stats();
  s.running = running_;
  s.finished = finished_;
  s.steps = forward_steps_;
  s.tokens_processed = tokens_processed_;
  s.prefix_query_tokens = prefix_query_tokens_;
  s.prefix_hit_tokens = prefix_hit_tokens_;
  s.images = images_;
  s.image_cache_hits = image_cache_hits_;
  return s;
}

absl::Span<const float> EngineCore::Impl::LastLogits(SequenceId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second->logits_step != steps_ ||
      last_step_on_device_) {
    return {};
  }
  return absl::MakeConstSpan(logits_.get() + it->second->logits_row * vocab_,
                             vocab_);
}

// ---------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<EngineCore>> EngineCore::Create(
    std::shared_ptr<const ModelWeights> weights, ThreadPool* threads,
    EngineOptions options) {
  if (weights == nullptr || threads == nullptr) {
    return absl::InvalidArgumentError("EngineCore needs weights and threads");
  }
  if (options.max_step_tokens < 1 || options.max_sequences < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_step_tokens (", options.max_step_tokens, ") and max_sequences (",
        options.max_sequences, ") must be >= 1"));
  }
  if (options.kv_memory.bytes == 0 && options.kv_memory.fraction == 0.0) {
    options.kv_memory.fraction = 0.5;
  }
  if (!options.available_bytes) {
    if (options.device.is_cpu()) {
      options.available_bytes = ReadMemAvailableBytes;
    } else {
      // A fractional budget is of the device's free memory (the plugin's
      // query; its error, e.g. no driver, ends the creation here) less the
      // weights, which the backend uploads before its KV cache (as stored
      // or smaller, so their host size bounds them).
      BackendOptions bo;
      bo.plugin_path = options.backend_plugin_path;
      absl::StatusOr<DeviceInfo> info = QueryDevice(options.device, bo);
      if (!info.ok()) return info.status();
      const int64_t free_bytes =
          std::max<int64_t>(0, info->free_bytes - weights->weight_bytes);
      options.available_bytes = [free_bytes]() -> absl::StatusOr<int64_t> {
        return free_bytes;
      };
    }
  }
  const KvDType kv_dtype = options.kv_dtype.value_or(KvDType::kBF16);
  if (!options.device.is_cpu() && kv_dtype != KvDType::kF32 &&
      kv_dtype != KvDType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-dtype ", KvDTypeName(kv_dtype), " is not supported on ",
        options.device.ToString(), ": the device KV cache is bf16 (the ",
        "default) or f32"));
  }
  absl::StatusOr<KvGeometry> geometry = ComputeKvGeometry(
      KvModelShape::FromConfig(weights->config), options.kv_memory,
      options.page_size, options.max_sequences, options.available_bytes,
      kv_dtype);
  if (!geometry.ok()) return geometry.status();
  geometry->huge_pages = options.kv_huge_pages && options.device.is_cpu();
  absl::StatusOr<int64_t> capacity =
      ResolveMaxSeqLen(options.max_seq_len, weights->config.max_context,
                       geometry->total_tokens);
  if (!capacity.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-seq-len: ", capacity.status().message()));
  }
  options.max_seq_len = *capacity;
  // A device backend keeps keys, values and states in device memory; the
  // host pool then only accounts for them.
  const bool prefix_cache = options.prefix_cache && options.device.is_cpu() &&
                            geometry->linear_state_bytes_per_sequence == 0;
  absl::StatusOr<std::unique_ptr<KvPool>> pool =
      KvPool::Create(*geometry,
                     options.device.is_cpu() ? KvPoolMemory::kHost
                                             : KvPoolMemory::kAccountingOnly,
                     prefix_cache);
  if (!pool.ok()) return pool.status();
  auto impl = std::make_unique<Impl>(std::move(weights), threads,
                                     std::move(options), std::move(*pool));
  if (absl::Status s = impl->Init(); !s.ok()) return s;
  return std::unique_ptr<EngineCore>(new EngineCore(std::move(impl)));
}

EngineCore::EngineCore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EngineCore::~EngineCore() = default;

absl::Status EngineCore::AddSequence(SequenceId id,
                                     absl::Span<const int32_t> prompt,
                                     int64_t max_seq_len,
                                     const SamplingParams& params,
                                     absl::Span<const int32_t> stop_token_ids,
                                     int64_t max_new_tokens,
                                     const LedgerPages* ledger,
                                     int64_t resumed_outputs,
                                     absl::Span<const SequenceImage> images) {
  return impl_->AddSequence(id, prompt, max_seq_len, params, stop_token_ids,
                            max_new_tokens, ledger, resumed_outputs, images);
}

absl::Status EngineCore::AssignPages(SequenceId id,
                                     absl::Span<const int32_t> pages) {
  return impl_->AssignPages(id, pages);
}

absl::Status EngineCore::Step(absl::Span<const StepPlanEntry> plan,
                              StepResult* result) {
  return impl_->Step(plan, result);
}

absl::Status EngineCore::Release(SequenceId id) { return impl_->Release(id); }
absl::Status EngineCore::MarkForExport(SequenceId id) {
  return impl_->MarkForExport(id);
}
std::vector<std::pair<SequenceId, KvHandoff>> EngineCore::TakeExports() {
  return impl_->TakeExports();
}
absl::Status EngineCore::ImportKv(SequenceId id, const KvHandoff& handoff,
                                  const std::string& model) {
  return impl_->ImportKv(id, handoff, model);
}
KvHandoffShape EngineCore::HandoffShape() const {
  return impl_->HandoffShape();
}
int64_t EngineCore::CachedPrefixTokens(SequenceId id) const {
  return impl_->CachedPrefixTokens(id);
}

int64_t EngineCore::max_seq_len() const { return impl_->max_seq_len(); }
bool EngineCore::prefix_cache_enabled() const {
  return impl_->prefix_cache_enabled();
}
const KvGeometry& EngineCore::Geometry() const { return impl_->geometry(); }
EngineStats EngineCore::Stats() const { return impl_->Stats(); }
int64_t EngineCore::ResidentBytes() const { return impl_->ResidentBytes(); }
const ModelConfig& EngineCore::model_config() const { return impl_->config(); }
const DeviceSpec& EngineCore::device() const { return impl_->device(); }
std::string EngineCore::Describe() const { return impl_->description(); }
absl::StatusOr<double> EngineCore::MeasureDeviceReadBandwidth(
    int64_t buffer_bytes) {
  return impl_->MeasureReadBandwidth(buffer_bytes);
}
absl::Span<const float> EngineCore::LastLogits(SequenceId id) const {
  return impl_->LastLogits(id);
}

}  // namespace pdserve
