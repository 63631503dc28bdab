// Pre-tokenizers of the byte-level BPE families: hand-written matchers with
// exactly the semantics of the reference regular expressions (leftmost
// alternative first, greedy, one-character lookahead), over Unicode classes.
#ifndef PDSERVE_SERVER_TOKENIZER_PRETOKENIZER_H_
#define PDSERVE_SERVER_TOKENIZER_PRETOKENIZER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pdserve {

enum class PreTokenizerKind {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // As kLlama3 with \p{N} (single digits) instead of \p{N}{1,3}.
  kQwen2,
  // As kQwen2 with marks joining letters (Qwen3.5):
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|
  //  ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen35,
  // Every \p{N} character alone (Digits, individual_digits), then kGpt2.
  kSmolLM,
};

// Maps a GGUF `tokenizer.ggml.pre` value to a kind, following llama.cpp's
// grouping: gpt-2/mpt/olmo/jais -> kGpt2; llama-bpe/llama3/dbrx/smaug-bpe ->
// kLlama3; qwen2/stablelm2/deepseek-r1-qwen -> kQwen2; qwen35 -> kQwen35;
// smollm/starcoder/refact/codeshell -> kSmolLM. "default" (or a missing key) ->
// kGpt2, the Hugging Face ByteLevel regex (llama.cpp uses a punctuation-first
// variant there). NotFound names unknown values.
absl::StatusOr<PreTokenizerKind> PreTokenizerFromGgufName(
    std::string_view name);
// The reference regex of the kind (for matching tokenizer.json patterns).
std::string_view PreTokenizerRegex(PreTokenizerKind kind);
const char* PreTokenizerName(PreTokenizerKind kind);

// A piece of the input: byte offsets [begin, end).
struct Piece {
  uint32_t begin;
  uint32_t end;
};

// Splits valid UTF-8 `text` (< 4 GiB) into pieces covering it in order.
// Reuses `scratch`-like internal buffers per call; thread-safe (no state).
void PreTokenize(PreTokenizerKind kind, std::string_view text,
                 std::vector<Piece>* pieces);

}  // namespace pdserve

#endif  // PDSERVE_SERVER_TOKENIZER_PRETOKENIZER_H_
