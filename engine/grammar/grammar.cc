#include "engine/grammar/grammar.h"

#include <dlpack/dlpack.h>
#include <xgrammar/xgrammar.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <future>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace pdserve::grammar {

class CompiledGrammar {
 public:
  explicit CompiledGrammar(xgrammar::CompiledGrammar g) : g_(std::move(g)) {}
  const xgrammar::CompiledGrammar& get() const { return g_; }

 private:
  xgrammar::CompiledGrammar g_;
};

namespace {

using CompileResult = absl::StatusOr<std::shared_ptr<const CompiledGrammar>>;

// A string as an EBNF literal ("..." with \" \\ \n \t \r and \xHH escapes).
std::string EbnfLiteral(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          static const char kHex[] = "0123456789abcdef";
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// xgrammar's message without its "[hh:mm:ss] file.cc:line: " prefix and
// trailing newline.
std::string CleanError(std::string m) {
  if (!m.empty() && m[0] == '[') {
    const size_t close = m.find("] ");
    const size_t colon = close == std::string::npos ? close : m.find(": ", close);
    if (colon != std::string::npos) m.erase(0, colon + 2);
  }
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

// The cache key: kind, options and texts, length-prefixed.
std::string SpecKey(const GrammarSpec& spec) {
  std::string key = absl::StrCat(static_cast<int>(spec.kind), ":", spec.strict,
                                 ":", spec.prefix.size(), ":", spec.prefix, ":",
                                 spec.suffix.size(), ":", spec.suffix, ":",
                                 spec.text.size(), ":", spec.text);
  for (const std::string& c : spec.choices) absl::StrAppend(&key, ":", c.size(), ":", c);
  return key;
}

absl::Status CheckLimits(const GrammarSpec& spec) {
  const char* kind = GrammarKindName(spec.kind);
  if (spec.text.size() > kMaxGrammarTextBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        kind, " has ", spec.text.size(), " bytes; at most ", kMaxGrammarTextBytes));
  }
  if (spec.prefix.size() + spec.suffix.size() > kMaxGrammarTextBytes) {
    return absl::InvalidArgumentError("grammar prefix and suffix are too long");
  }
  switch (spec.kind) {
    case GrammarSpec::Kind::kChoice:
      if (spec.choices.empty() || spec.choices.size() > kMaxChoices) {
        return absl::InvalidArgumentError(absl::StrCat(
            "choice has ", spec.choices.size(), " entries; it must have 1 to ",
            kMaxChoices));
      }
      for (size_t i = 0; i < spec.choices.size(); ++i) {
        if (spec.choices[i].empty() || spec.choices[i].size() > kMaxChoiceBytes) {
          return absl::InvalidArgumentError(absl::StrCat(
              "choice[", i, "] has ", spec.choices[i].size(),
              " bytes; it must have 1 to ", kMaxChoiceBytes));
        }
      }
      break;
    case GrammarSpec::Kind::kJsonSchema:
    case GrammarSpec::Kind::kRegex:
    case GrammarSpec::Kind::kEbnf:
      if (spec.text.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(kind, " is empty"));
      }
      break;
    default:
      break;
  }
  return absl::OkStatus();
}

// The xgrammar grammar of a spec; throws xgrammar's errors.
xgrammar::Grammar BuildGrammar(const GrammarSpec& spec) {
  xgrammar::Grammar body = [&] {
    switch (spec.kind) {
      case GrammarSpec::Kind::kJsonObject:
        return xgrammar::Grammar::FromJSONSchema(R"({"type": "object"})",
                                                 /*any_whitespace=*/true,
                                                 std::nullopt, std::nullopt,
                                                 /*strict_mode=*/false);
      case GrammarSpec::Kind::kJsonSchema:
        return xgrammar::Grammar::FromJSONSchema(
            spec.text, /*any_whitespace=*/true, std::nullopt, std::nullopt,
            spec.strict, /*max_whitespace_cnt=*/4);
      case GrammarSpec::Kind::kRegex:
        return xgrammar::Grammar::FromRegex(spec.text);
      case GrammarSpec::Kind::kChoice: {
        std::string ebnf = "root ::= ";
        for (size_t i = 0; i < spec.choices.size(); ++i) {
          absl::StrAppend(&ebnf, i > 0 ? " | " : "", EbnfLiteral(spec.choices[i]));
        }
        return xgrammar::Grammar::FromEBNF(ebnf);
      }
      case GrammarSpec::Kind::kEbnf:
      default:
        return xgrammar::Grammar::FromEBNF(spec.text);
    }
  }();
  if (spec.prefix.empty() && spec.suffix.empty()) return body;
  std::vector<xgrammar::Grammar> parts;
  if (!spec.prefix.empty()) {
    parts.push_back(xgrammar::Grammar::FromEBNF("root ::= " + EbnfLiteral(spec.prefix)));
  }
  parts.push_back(body);
  if (!spec.suffix.empty()) {
    parts.push_back(xgrammar::Grammar::FromEBNF("root ::= " + EbnfLiteral(spec.suffix)));
  }
  return xgrammar::Grammar::Concat(parts);
}

}  // namespace

const char* GrammarKindName(GrammarSpec::Kind kind) {
  switch (kind) {
    case GrammarSpec::Kind::kJsonObject: return "json_object";
    case GrammarSpec::Kind::kJsonSchema: return "json_schema";
    case GrammarSpec::Kind::kRegex: return "regex";
    case GrammarSpec::Kind::kChoice: return "choice";
    case GrammarSpec::Kind::kEbnf: return "grammar";
  }
  return "grammar";
}

class GrammarCompiler::Impl {
 public:
  Impl(xgrammar::TokenizerInfo info, Options options, int32_t vocab_size)
      : compiler_(info, options.threads, /*cache_enabled=*/false),
        options_(options),
        vocab_size_(vocab_size) {}

  static CompileResult Run(const std::shared_ptr<Impl>& self,
                           const GrammarSpec& spec) {
    if (absl::Status s = CheckLimits(spec); !s.ok()) return s;
    std::shared_future<CompileResult> future;
    if (absl::Status s = Start(self, spec, &future); !s.ok()) return s;
    const auto limit = absl::ToChronoMilliseconds(self->options_.compile_timeout);
    if (future.wait_for(limit) != std::future_status::ready) {
      return absl::InvalidArgumentError(absl::StrCat(
          GrammarKindName(spec.kind), " took more than ",
          absl::ToInt64Milliseconds(self->options_.compile_timeout),
          " ms to compile (the limit); simplify it"));
    }
    return future.get();
  }

  // The future of `spec`'s compilation: the cached one, or a new one started
  // on a detached thread.
  static absl::Status Start(const std::shared_ptr<Impl>& self,
                            const GrammarSpec& spec,
                            std::shared_future<CompileResult>* out) {
    const std::string key = SpecKey(spec);
    std::shared_future<CompileResult>& future = *out;
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      auto it = self->cache_.find(key);
      if (it != self->cache_.end()) {
        ++self->hits_;
        self->lru_.splice(self->lru_.begin(), self->lru_, it->second.lru);
        future = it->second.result;
      } else {
        if (self->running_ >= self->options_.max_running) {
          return absl::ResourceExhaustedError(absl::StrCat(
              self->running_, " grammar compilations are running (the limit); "
              "try again later"));
        }
        ++self->running_;
        ++self->compiled_;
        auto promise = std::make_shared<std::promise<CompileResult>>();
        future = promise->get_future().share();
        self->Insert(key, future);
        // Detached: a compilation over the timeout finishes in the
        // background; `self` keeps the compiler alive until then.
        std::thread([self, spec, key, promise] {
          CompileResult r = self->CompileNow(spec);
          std::lock_guard<std::mutex> lock(self->mu_);
          --self->running_;
          if (!r.ok()) self->Erase(key);  // errors are not cached
          promise->set_value(std::move(r));
        }).detach();
      }
    }
    return absl::OkStatus();
  }

  int32_t vocab_size() const { return vocab_size_; }
  int64_t compiled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return compiled_;
  }
  int64_t hits() const {
    std::lock_guard<std::mutex> lock(mu_);
    return hits_;
  }

 private:
  struct Entry {
    std::shared_future<CompileResult> result;
    std::list<std::string>::iterator lru;
  };

  CompileResult CompileNow(const GrammarSpec& spec) {
    try {
      xgrammar::Grammar g = BuildGrammar(spec);
      return std::make_shared<const CompiledGrammar>(compiler_.CompileGrammar(g));
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(
          GrammarKindName(spec.kind), " does not compile: ", CleanError(e.what())));
    }
  }

  void Insert(const std::string& key, std::shared_future<CompileResult> f) {
    lru_.push_front(key);
    cache_[key] = Entry{std::move(f), lru_.begin()};
    while (static_cast<int>(cache_.size()) > options_.cache_entries) {
      cache_.erase(lru_.back());
      lru_.pop_back();
    }
  }
  void Erase(const std::string& key) {
    auto it = cache_.find(key);
    if (it == cache_.end()) return;
    lru_.erase(it->second.lru);
    cache_.erase(it);
  }

  xgrammar::GrammarCompiler compiler_;  // thread-safe
  const Options options_;
  const int32_t vocab_size_;
  mutable std::mutex mu_;  // guards everything below
  std::unordered_map<std::string, Entry> cache_;
  std::list<std::string> lru_;  // most recent first
  int running_ = 0;
  int64_t compiled_ = 0, hits_ = 0;
};

absl::StatusOr<std::unique_ptr<GrammarCompiler>> GrammarCompiler::Create(
    GrammarVocabulary vocab, Options options) {
  const int64_t n = static_cast<int64_t>(vocab.token_bytes.size());
  if (n == 0 || n > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar vocabulary has ", n, " tokens"));
  }
  for (int32_t id : vocab.stop_ids) {
    if (id < 0 || id >= n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "grammar stop id ", id, " is outside the vocabulary [0, ", n, ")"));
    }
  }
  try {
    xgrammar::TokenizerInfo info(vocab.token_bytes, xgrammar::VocabType::RAW,
                                 static_cast<int>(n), vocab.stop_ids);
    return std::unique_ptr<GrammarCompiler>(new GrammarCompiler(
        std::make_shared<Impl>(std::move(info), options, static_cast<int32_t>(n))));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar vocabulary rejected: ", e.what()));
  }
}

GrammarCompiler::~GrammarCompiler() = default;

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::Compile(
    const GrammarSpec& spec) {
  return Impl::Run(impl_, spec);
}

void GrammarCompiler::Prefetch(const GrammarSpec& spec) {
  if (!CheckLimits(spec).ok()) return;
  std::shared_future<CompileResult> ignored;
  (void)Impl::Start(impl_, spec, &ignored);
}

int32_t GrammarCompiler::vocab_size() const { return impl_->vocab_size(); }
int64_t GrammarCompiler::compiled_count() const { return impl_->compiled(); }
int64_t GrammarCompiler::cache_hits() const { return impl_->hits(); }

// ---------------------------------------------------------------------------

struct GrammarMatcher::State {
  std::shared_ptr<const CompiledGrammar> grammar;
  xgrammar::GrammarMatcher matcher;
  int32_t vocab_size;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar) {
  const int32_t vocab = grammar->get().GetTokenizerInfo().GetVocabSize();
  xgrammar::GrammarMatcher m(grammar->get());
  state_ = std::unique_ptr<State>(new State{std::move(grammar), std::move(m), vocab});
}

GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;

void GrammarMatcher::FillMask(absl::Span<uint32_t> mask) {
  DLTensor t;
  int64_t shape[1] = {static_cast<int64_t>(mask.size())};
  t.data = mask.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  state_->matcher.FillNextTokenBitmask(&t);
}

absl::Status GrammarMatcher::Accept(int32_t token) {
  if (state_->matcher.AcceptToken(token)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("token ", token, " is not allowed by the grammar here"));
}

absl::Status GrammarMatcher::AcceptText(const std::string& text) {
  if (state_->matcher.AcceptString(text)) return absl::OkStatus();
  return absl::InvalidArgumentError("text is not allowed by the grammar here");
}

bool GrammarMatcher::terminated() const { return state_->matcher.IsTerminated(); }
bool GrammarMatcher::completed() const { return state_->matcher.IsCompleted(); }
int32_t GrammarMatcher::vocab_size() const { return state_->vocab_size; }

}  // namespace pdserve::grammar
