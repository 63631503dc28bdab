// Grammar-constrained decoding: a constraint (JSON schema, JSON object,
// regex, choice list, EBNF grammar, optionally between fixed prefix/suffix
// text) compiled against a vocabulary into a CompiledGrammar, and a
// per-sequence GrammarMatcher that fills the allowed-token bitmask of the
// next step and advances with each sampled token.
//
// The grammar engine underneath is xgrammar's C++ core (the one vLLM, SGLang
// and TensorRT-LLM use), built from its PyPI source distribution by
// scripts/setup-xgrammar.sh. It compiles to a pushdown automaton with a
// per-state token-mask cache, so matching never backtracks: a regex such as
// (a+)+b costs the same as a+b. What can be expensive is compiling; the
// compiler bounds it (GrammarCompiler::Options::compile_timeout) and caches
// every compiled grammar by its constraint.
#ifndef PDSERVE_ENGINE_GRAMMAR_GRAMMAR_H_
#define PDSERVE_ENGINE_GRAMMAR_GRAMMAR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace pdserve::grammar {

// What the output must follow. Exactly one kind; `prefix` and `suffix` are
// fixed text around it (e.g. "<tool_call>\n" ... "\n</tool_call>").
struct GrammarSpec {
  enum class Kind {
    kJsonObject,  // any JSON object
    kJsonSchema,  // `text`: a JSON Schema (the subset OpenAI's strict mode accepts)
    kRegex,       // `text`: a regular expression the whole output matches
    kChoice,      // `choices`: the output is exactly one of them
    kEbnf,        // `text`: an EBNF grammar (GBNF syntax) with rule "root"
  };
  Kind kind = Kind::kJsonObject;
  std::string text;
  std::vector<std::string> choices;
  // JSON schema: properties not listed are refused (OpenAI strict: true).
  bool strict = true;
  std::string prefix, suffix;
};

// "json_object", "json_schema", "regex", "choice", "grammar".
const char* GrammarKindName(GrammarSpec::Kind kind);

// The size limits of a spec, checked before compiling.
inline constexpr size_t kMaxGrammarTextBytes = 64 * 1024;
inline constexpr size_t kMaxChoices = 1024;
inline constexpr size_t kMaxChoiceBytes = 4096;

// The tokens a grammar is matched against. `token_bytes[id]` is what token
// `id` appends to the text; special tokens (control tokens, padding ids)
// have empty bytes and are never allowed except `stop_ids`, which end the
// output where the grammar may end.
struct GrammarVocabulary {
  std::vector<std::string> token_bytes;  // [vocab_size]
  std::vector<int32_t> stop_ids;
};

// 32-bit words of an allowed-token bitmask for `vocab_size` tokens: bit
// (id % 32) of word id / 32 is set when id is allowed.
inline int32_t MaskWords(int32_t vocab_size) { return (vocab_size + 31) / 32; }
inline bool MaskAllows(const uint32_t* mask, int32_t id) {
  return (mask[id >> 5] >> (id & 31)) & 1u;
}

class CompiledGrammar;  // opaque; shared, immutable

// Compiles specs for one vocabulary. Thread-safe: any number of threads may
// Compile at once; a spec being compiled by another thread is waited for,
// not compiled twice.
class GrammarCompiler {
 public:
  struct Options {
    // A compilation still running after this is answered with
    // INVALID_ARGUMENT (it finishes in the background and is then cached).
    absl::Duration compile_timeout = absl::Seconds(10);
    // Compiled grammars kept (least recently used dropped first).
    int cache_entries = 256;
    // Compilations running at once, timed-out ones included; more are
    // RESOURCE_EXHAUSTED.
    int max_running = 4;
    int threads = 2;  // xgrammar's threads per compilation
  };

  // INVALID_ARGUMENT for an empty vocabulary or a stop id outside it.
  static absl::StatusOr<std::unique_ptr<GrammarCompiler>> Create(
      GrammarVocabulary vocab, Options options);
  ~GrammarCompiler();

  // The compiled grammar of `spec`, from the cache when compiled before.
  // INVALID_ARGUMENT naming the kind and the engine's message for a schema,
  // regex or grammar that does not compile, a spec over its size limits, or
  // a compilation over the timeout; RESOURCE_EXHAUSTED when max_running
  // compilations are under way.
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(
      const GrammarSpec& spec);
  // Starts compiling `spec` in the background unless it is cached or under
  // way (a later Compile then waits only for what is left). Never blocks;
  // problems surface at Compile.
  void Prefetch(const GrammarSpec& spec);

  int32_t vocab_size() const;
  // Compilations done (cache misses), and cache hits, since creation.
  int64_t compiled_count() const;
  int64_t cache_hits() const;

  class Impl;

 private:
  explicit GrammarCompiler(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;  // shared with background compilations
};

// One sequence's position in its grammar. Thread-compatible: FillMask may
// run on another thread than Accept, never at the same time.
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);
  ~GrammarMatcher();
  GrammarMatcher(GrammarMatcher&&) noexcept;

  // Writes the allowed tokens of the next step into `mask`
  // (MaskWords(vocab_size) words). Once the grammar is complete only the
  // stop ids are allowed.
  void FillMask(absl::Span<uint32_t> mask);
  // Advances past `token`. INVALID_ARGUMENT when the grammar does not allow
  // it (the matcher is unchanged).
  absl::Status Accept(int32_t token);
  // Advances past `text` (prefilled output, e.g. a forced prefix).
  absl::Status AcceptText(const std::string& text);
  // A stop id was accepted where the grammar may end.
  bool terminated() const;
  // The output so far is a complete sentence of the grammar.
  bool completed() const;
  int32_t vocab_size() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace pdserve::grammar

#endif  // PDSERVE_ENGINE_GRAMMAR_GRAMMAR_H_
