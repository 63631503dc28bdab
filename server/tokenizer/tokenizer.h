// Text <-> token id conversion for the supported vocabularies.
#ifndef PDSERVE_SERVER_TOKENIZER_TOKENIZER_H_
#define PDSERVE_SERVER_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace pdserve {

class GgufFile;

// A loaded vocabulary with its encoding algorithm: byte-level BPE with a
// per-family pre-tokenizer (GPT-2, Qwen2/2.5/3, Qwen3.5, Llama-3, SmolLM2), or
// SentencePiece-style BPE with byte fallback (Llama-2, llama2.c).
// Immutable after loading (apart from an internal, locked word cache);
// every method is thread-safe.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads from whatever `path` is: a GGUF file (vocabulary in its metadata;
  // vocabulary-only files work), a Hugging Face folder or tokenizer.json
  // (byte-level BPE or SentencePiece-style BPE with byte fallback; the
  // tokenizer_config.json beside it supplies the chat template, BOS/EOS and
  // add_bos), or a llama2.c tokenizer.bin. Unsupported variants are
  // Unimplemented errors naming what is unsupported.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(
      const std::string& path);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(
      const GgufFile& file);

  // Encodes UTF-8 text without BOS. With parse_special, occurrences of the
  // text of special/added tokens ("<|im_end|>", "<think>", "<s>") become
  // their single ids (longest match first); with it off (the default, for
  // user text) nothing is special: such text is tokenized as plain text, so
  // a user cannot forge a turn boundary. Vocabularies with a space prefix
  // (SentencePiece) prepend "▁" at the start of the text and after each
  // parsed special token, as llama.cpp does.
  // Invalid UTF-8 is an InvalidArgument error "invalid UTF-8 at byte offset
  // N (byte 0xXX) of M-byte text"; nothing is replaced silently. Texts of
  // 4 GiB or more are InvalidArgument too. Qwen2/Qwen3 vocabularies
  // NFC-normalise the text first (as the Hugging Face reference does, GGUF
  // path included); Qwen3.5's ("qwen35", no normaliser) do not.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(
      std::string_view text, bool parse_special = false) const = 0;

  // Bytes of one token as it contributes to decoded text (may be a partial
  // UTF-8 sequence for byte tokens; SentencePiece "▁" becomes a space).
  // Special tokens decode to their text. Out-of-range ids give "".
  virtual std::string TokenBytes(int32_t id) const = 0;

  // Concatenated TokenBytes of `ids` (may end in a partial UTF-8 sequence;
  // never validated). For vocabularies with a space prefix, the one leading
  // space that Encode added (from the first non-special token) is removed,
  // so Decode(Encode(s)) == s (except, as in SentencePiece itself, that a
  // literal "▁" in SentencePiece input decodes as a space, and NFC
  // vocabularies (Qwen2/3) give back the NFC form of s). skip_special drops
  // control/added/unknown tokens.
  virtual std::string Decode(absl::Span<const int32_t> ids,
                             bool skip_special = false) const;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when the vocabulary has none
  virtual int32_t eos_id() const = 0;  // -1 when the vocabulary has none
  // Ids that end generation: eos plus the end-of-turn tokens the vocabulary
  // defines (<|im_end|>, <|eot_id|>, <|eom_id|>, <|endoftext|>, <|end|>,
  // <end_of_turn>), sorted, without duplicates.
  virtual std::vector<int32_t> stop_ids() const = 0;
  // Whether the model expects BOS before the prompt.
  virtual bool add_bos() const = 0;
  // Whether Encode prepends "▁" (SentencePiece add_space_prefix).
  virtual bool add_space_prefix() const = 0;
  // Control, user-defined (added) and unknown tokens.
  virtual bool IsSpecial(int32_t id) const = 0;
  // The id of a token whose text is exactly `text` (special tokens by their
  // text, normal tokens by their decoded bytes), or -1.
  virtual int32_t FindToken(std::string_view text) const = 0;
  // The model's chat template source (Jinja), empty when none is known.
  virtual const std::string& chat_template() const = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVER_TOKENIZER_TOKENIZER_H_
