// `pdserve generate`: single-process text generation for debugging and
// benchmarks. Prints the generated text (not the prompt) on stdout as it
// streams, and prefill / decode speed on stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/backend/device_spec.h"
#include "engine/core/engine_core.h"
#include "engine/kv/kv_storage.h"
#include "engine/loader/model_loader.h"
#include "engine/model/sampler.h"
#include "engine/model/sequence_runner.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"
#include "server/chat/chat_template.h"
#include "server/cli/command.h"
#include "server/tokenizer/detokenizer.h"
#include "server/tokenizer/tokenizer.h"

namespace pdserve::cli {
namespace {

constexpr char kUsage[] =
    "usage: pdserve generate --model PATH (--prompt TEXT | --prompt-ids "
    "\"1 2 3\") [options]\n"
    "  --model PATH          GGUF file, safetensors folder or llama2.c .bin\n"
    "  --tokenizer PATH      vocabulary when the model has none (llama2.c:\n"
    "                        tok512.bin); default: the model itself\n"
    "  --prompt TEXT         prompt text (BOS added when the vocabulary asks)\n"
    "  --prompt-ids IDS      prompt token ids, space/comma separated, as is\n"
    "  --chat                wrap the prompt as one user turn with the\n"
    "                        model's chat template (ChatML when it has none)\n"
    "  -n N                  tokens to generate (default 64)\n"
    "  --temperature T       0 = greedy (default 0)\n"
    "  --top-k K --top-p P --min-p P --repetition-penalty R\n"
    "  --seed S              sampling seed (default 0)\n"
    "  --threads K           worker threads (default: all cores)\n"
    "  --device D            cpu (default), cuda or cuda:N (CUDA plugin)\n"
    "  --batch N             prefill chunk size (default 512)\n"
    "  --kv-dtype T          KV cache storage: bf16 (default), f16, q8_0 or\n"
    "                        f32 (a device takes bf16 or f32)\n"
    "  --ids                 print generated token ids instead of text\n"
    "  --ignore-eos          do not stop at end-of-sequence tokens\n";

struct Options {
  std::string model, tokenizer, prompt, prompt_ids;
  bool has_prompt = false, chat = false, print_ids = false, ignore_eos = false;
  int64_t n = 64, threads = 0, batch = 512;
  SamplingParams sampling;
  DeviceSpec device;
  std::optional<KvDType> kv_dtype;  // unset: bf16
};

// Parses argv; returns an error message (empty on success).
std::string ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string* out) -> bool {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    auto num = [&](auto* out) -> std::string {
      if (!value(&v)) return absl::StrCat(arg, " needs a value");
      bool ok;
      if constexpr (std::is_same_v<std::remove_pointer_t<decltype(out)>,
                                   float>) {
        ok = absl::SimpleAtof(v, out);
      } else {
        ok = absl::SimpleAtoi(v, out);
      }
      return ok ? "" : absl::StrCat(arg, ": '", v, "' is not a number");
    };
    std::string err;
    if (arg == "--model") {
      if (!value(&o->model)) err = "--model needs a path";
    } else if (arg == "--tokenizer") {
      if (!value(&o->tokenizer)) err = "--tokenizer needs a path";
    } else if (arg == "--prompt") {
      if (!value(&o->prompt)) err = "--prompt needs text";
      o->has_prompt = true;
    } else if (arg == "--prompt-ids") {
      if (!value(&o->prompt_ids)) err = "--prompt-ids needs ids";
    } else if (arg == "-n" || arg == "--n") {
      err = num(&o->n);
    } else if (arg == "--temperature") {
      err = num(&o->sampling.temperature);
    } else if (arg == "--top-k") {
      err = num(&o->sampling.top_k);
    } else if (arg == "--top-p") {
      err = num(&o->sampling.top_p);
    } else if (arg == "--min-p") {
      err = num(&o->sampling.min_p);
    } else if (arg == "--repetition-penalty") {
      err = num(&o->sampling.repetition_penalty);
    } else if (arg == "--seed") {
      err = num(&o->sampling.seed);
    } else if (arg == "--threads") {
      err = num(&o->threads);
    } else if (arg == "--batch") {
      err = num(&o->batch);
    } else if (arg == "--device") {
      if (!value(&v)) {
        err = "--device needs cpu, cuda or cuda:N";
      } else if (auto d = ParseDeviceSpec(v); d.ok()) {
        o->device = *d;
      } else {
        err = std::string(d.status().message());
      }
    } else if (arg == "--kv-dtype") {
      if (!value(&v)) {
        err = "--kv-dtype needs f32, f16, bf16 or q8_0";
      } else if (auto d = ParseKvDType(v); d.ok()) {
        o->kv_dtype = *d;
      } else {
        err = std::string(d.status().message());
      }
    } else if (arg == "--chat") {
      o->chat = true;
    } else if (arg == "--ids") {
      o->print_ids = true;
    } else if (arg == "--ignore-eos") {
      o->ignore_eos = true;
    } else {
      err = absl::StrCat("unknown option '", arg, "'");
    }
    if (!err.empty()) return err;
  }
  if (o->model.empty()) return "--model is required";
  if (o->has_prompt == !o->prompt_ids.empty()) {
    return "give exactly one of --prompt and --prompt-ids";
  }
  if (o->n < 1) return absl::StrCat("-n must be >= 1, got ", o->n);
  if (o->threads < 0 || o->threads > 1024) {
    return absl::StrCat("--threads must be in [1, 1024], got ", o->threads);
  }
  if (o->batch < 1) return absl::StrCat("--batch must be >= 1, got ", o->batch);
  if (absl::Status s = ValidateSamplingParams(o->sampling); !s.ok()) {
    return std::string(s.message());
  }
  return "";
}

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view piece :
       absl::StrSplit(text, absl::ByAnyChar(" ,\t"), absl::SkipEmpty())) {
    int32_t id;
    if (!absl::SimpleAtoi(piece, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt-ids: '", piece, "' is not a token id"));
    }
    ids.push_back(id);
  }
  if (ids.empty()) return absl::InvalidArgumentError("--prompt-ids is empty");
  return ids;
}

// The prompt's token ids from --prompt (+ --chat) or --prompt-ids.
absl::StatusOr<std::vector<int32_t>> PromptIds(const Options& o,
                                               const Tokenizer* tok) {
  if (!o.prompt_ids.empty()) return ParseIds(o.prompt_ids);
  if (tok == nullptr) {
    return absl::FailedPreconditionError(
        "--prompt needs a vocabulary: pass --tokenizer (or --prompt-ids)");
  }
  if (o.chat) {
    auto id_text = [&](int32_t id) {
      return id >= 0 ? tok->TokenBytes(id) : std::string();
    };
    auto tmpl = ChatTemplate::Create(tok->chat_template(),
                                     id_text(tok->bos_id()),
                                     id_text(tok->eos_id()));
    if (!tmpl.ok()) return tmpl.status();
    ChatMessage user;
    user.role = "user";
    user.content = o.prompt;
    auto text = tmpl->Render({user}, ChatRenderOptions{});
    if (!text.ok()) return text.status();
    return tok->Encode(*text, /*parse_special=*/true);
  }
  auto ids = tok->Encode(o.prompt);
  if (!ids.ok()) return ids.status();
  if (tok->add_bos() && tok->bos_id() >= 0) {
    ids->insert(ids->begin(), tok->bos_id());
  }
  return ids;
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "pdserve generate: %s\n", std::string(s.message()).c_str());
  return 1;
}

// One token a TokenSource produced: `stop` when it is a stop id (its text
// is not printed), `last` when generation ends after it.
struct Produced {
  int32_t token = -1;
  bool stop = false;
  bool last = false;
};

// Produces the tokens of one sequence: First runs the prompt, Next feeds the
// previous token back.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual absl::StatusOr<Produced> First(
      const std::vector<int32_t>& prompt) = 0;
  virtual absl::StatusOr<Produced> Next(int32_t token) = 0;
  virtual std::string Describe() const = 0;
};

// --device cpu: a SequenceRunner and a Sampler in this process.
class CpuSource : public TokenSource {
 public:
  static absl::StatusOr<std::unique_ptr<CpuSource>> Create(
      const ModelWeights& w, ThreadPool& pool, int64_t capacity,
      const Options& o, const std::vector<int32_t>& stops) {
    auto runner = SequenceRunner::Create(
        w, pool, capacity, o.batch, o.kv_dtype.value_or(KvDType::kBF16));
    if (!runner.ok()) return runner.status();
    auto sampler = Sampler::Create(o.sampling, w.config.vocab_size);
    if (!sampler.ok()) return sampler.status();
    auto s = std::unique_ptr<CpuSource>(new CpuSource());
    s->runner_ = std::move(*runner);
    s->sampler_ = std::move(*sampler);
    s->scratch_.Reserve(static_cast<int32_t>(w.config.vocab_size));
    s->stops_ = stops;
    s->n_ = o.n;
    s->capacity_ = capacity;
    return s;
  }
  absl::StatusOr<Produced> First(const std::vector<int32_t>& prompt) override {
    sampler_->AddPrompt(prompt);
    return Sample(runner_->Feed(prompt));
  }
  absl::StatusOr<Produced> Next(int32_t token) override {
    return Sample(runner_->Feed({&token, 1}));
  }
  std::string Describe() const override { return "cpu"; }

 private:
  CpuSource() = default;
  absl::StatusOr<Produced> Sample(
      absl::StatusOr<absl::Span<const float>> logits) {
    if (!logits.ok()) return logits.status();
    auto next = sampler_->Sample(*logits, &scratch_);
    if (!next.ok()) return next.status();
    ++generated_;
    Produced p;
    p.token = next->token;
    p.stop = std::find(stops_.begin(), stops_.end(), p.token) != stops_.end();
    p.last = p.stop || generated_ >= n_ || runner_->position() >= capacity_;
    return p;
  }
  std::unique_ptr<SequenceRunner> runner_;
  std::unique_ptr<Sampler> sampler_;
  SamplerScratch scratch_;
  std::vector<int32_t> stops_;
  int64_t n_ = 0, capacity_ = 0, generated_ = 0;
};

// --device cuda[:N]: an EngineCore on the device backend with one sequence;
// prefill in chunks of --batch tokens.
class EngineSource : public TokenSource {
 public:
  static absl::StatusOr<std::unique_ptr<EngineSource>> Create(
      std::shared_ptr<const ModelWeights> w, ThreadPool& pool, int64_t capacity,
      const Options& o, const std::vector<int32_t>& stops) {
    EngineOptions eo;
    eo.device = o.device;
    eo.kv_dtype = o.kv_dtype;
    eo.max_sequences = 1;
    eo.max_step_tokens = o.batch;
    // Room for `capacity` tokens (+ a page of slack) and one state slot.
    const KvModelShape shape = KvModelShape::FromConfig(w->config);
    const int64_t page_bytes = RoundUpToOsPage(
        shape.num_attention_layers * 2 *
        KvRowBytes(o.kv_dtype.value_or(KvDType::kBF16), shape.kv_dim) *
        eo.page_size);
    const int64_t state_bytes = RoundUpToOsPage(
        shape.num_linear_layers *
        (shape.conv_state_floats + shape.recurrent_state_floats) * 4);
    eo.kv_memory.bytes =
        (capacity / eo.page_size + 2) * page_bytes + state_bytes;
    auto core = EngineCore::Create(std::move(w), &pool, eo);
    if (!core.ok()) return core.status();
    auto s = std::unique_ptr<EngineSource>(new EngineSource());
    s->core_ = std::move(*core);
    s->capacity_ = capacity;
    s->batch_ = o.batch;
    s->sampling_ = o.sampling;
    s->stops_ = stops;
    s->n_ = o.n;
    return s;
  }
  absl::StatusOr<Produced> First(const std::vector<int32_t>& prompt) override {
    if (absl::Status st =
            core_->AddSequence(kId, prompt, capacity_, sampling_, stops_, n_);
        !st.ok()) {
      return st;
    }
    int64_t pending = static_cast<int64_t>(prompt.size());
    for (;;) {
      const int32_t k = static_cast<int32_t>(std::min(pending, batch_));
      absl::StatusOr<Produced> p = Step(k);
      if (!p.ok() || p->token >= 0) return p;
      pending -= k;
    }
  }
  absl::StatusOr<Produced> Next(int32_t) override { return Step(1); }
  std::string Describe() const override { return core_->Describe(); }

 private:
  static constexpr SequenceId kId = 1;
  EngineSource() = default;
  // One Step of k tokens; token -1 while the prompt is not done.
  absl::StatusOr<Produced> Step(int32_t k) {
    const StepPlanEntry entry{kId, k};
    if (absl::Status st = core_->Step({&entry, 1}, &result_); !st.ok()) {
      return st;
    }
    const SequenceStepResult& r = result_.sequences[0];
    Produced p;
    if (!r.has_token) return p;
    p.token = r.token;
    p.stop = r.finish == FinishReason::kStop;
    p.last = r.finish != FinishReason::kNone;
    return p;
  }
  std::unique_ptr<EngineCore> core_;
  StepResult result_;
  int64_t capacity_ = 0, batch_ = 0, n_ = 0;
  SamplingParams sampling_;
  std::vector<int32_t> stops_;
};

int RunGenerate(int argc, char** argv) {
  Options o;
  if (argc == 2 && (std::string(argv[1]) == "--help" ||
                    std::string(argv[1]) == "-h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (std::string err = ParseArgs(argc, argv, &o); !err.empty()) {
    std::fprintf(stderr, "pdserve generate: %s\n\n%s", err.c_str(), kUsage);
    return 2;
  }
  auto weights = LoadModel(o.model);
  if (!weights.ok()) return Fail(weights.status());
  const ModelConfig config = (*weights)->config;
  const std::string source_format = (*weights)->source_format;

  std::unique_ptr<Tokenizer> tok;
  const std::string tok_path = o.tokenizer.empty() ? o.model : o.tokenizer;
  auto loaded = Tokenizer::Load(tok_path);
  if (loaded.ok()) {
    tok = std::move(*loaded);
  } else if (!o.tokenizer.empty() || !o.print_ids || o.has_prompt) {
    return Fail(loaded.status());
  }
  auto prompt = PromptIds(o, tok.get());
  if (!prompt.ok()) return Fail(prompt.status());

  const int64_t threads =
      o.threads > 0 ? o.threads
                    : std::max<int64_t>(1, std::thread::hardware_concurrency());
  ThreadPool pool(static_cast<int>(threads));
  const int64_t want = static_cast<int64_t>(prompt->size()) + o.n;
  const int64_t capacity =
      config.max_context > 0 ? std::min(want, config.max_context) : want;

  std::vector<int32_t> stops;
  if (!o.ignore_eos) {
    if (tok != nullptr) stops = tok->stop_ids();
    if (config.eos_token_id >= 0) stops.push_back(config.eos_token_id);
  }
  std::unique_ptr<TokenSource> source;
  if (o.device.is_cpu()) {
    auto cpu = CpuSource::Create(**weights, pool, capacity, o, stops);
    if (!cpu.ok()) return Fail(cpu.status());
    source = std::move(*cpu);
  } else {
    std::shared_ptr<const ModelWeights> shared(std::move(*weights));
    auto engine = EngineSource::Create(shared, pool, capacity, o, stops);
    if (!engine.ok()) return Fail(engine.status());
    source = std::move(*engine);
  }
  std::unique_ptr<Detokenizer> detok;
  if (tok != nullptr && !o.print_ids) {
    detok = std::make_unique<Detokenizer>(*tok, Detokenizer::Options{});
  }

  const auto t0 = std::chrono::steady_clock::now();
  auto next = source->First(*prompt);
  if (!next.ok()) return Fail(next.status());
  const auto t1 = std::chrono::steady_clock::now();
  int64_t generated = 0;
  std::chrono::steady_clock::time_point t2 = t1;
  for (;;) {
    ++generated;
    if (o.print_ids) {
      std::printf("%s%d", generated > 1 ? " " : "", next->token);
    } else if (!next->stop) {
      std::fputs(detok->Feed(next->token).c_str(), stdout);
    }
    std::fflush(stdout);
    if (next->last) break;
    next = source->Next(next->token);
    if (!next.ok()) return Fail(next.status());
    t2 = std::chrono::steady_clock::now();
  }
  if (detok != nullptr) std::fputs(detok->Finish().c_str(), stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  const double prefill_s = Seconds(t1 - t0);
  const double decode_s = Seconds(t2 - t1);
  const int64_t decoded = generated - 1;  // tokens fed back after prefill
  std::fprintf(stderr,
               "[generate] %s (%s), %lld threads, %s kernels, %s\n"
               "[generate] prefill: %zu tokens in %.3f s = %.1f tok/s\n"
               "[generate] decode: %lld tokens in %.3f s = %.1f tok/s\n",
               config.name.c_str(), source_format.c_str(),
               static_cast<long long>(threads), MatMulIsa(),
               source->Describe().c_str(), prompt->size(), prefill_s,
               prompt->size() / std::max(prefill_s, 1e-9),
               static_cast<long long>(decoded), decode_s,
               decoded / std::max(decode_s, 1e-9));
  return 0;
}

}  // namespace

PDSERVE_COMMAND(generate, "generate text from a prompt (single process)",
                RunGenerate);

}  // namespace pdserve::cli
