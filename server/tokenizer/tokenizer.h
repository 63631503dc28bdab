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

// A loaded vocabulary with its encoding algorithm (byte-level BPE with a
// per-family pre-tokenizer, or SentencePiece-style BPE with byte fallback).
// Immutable after loading; Encode/Decode are thread-safe.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads from whatever `path` is: a GGUF file (vocabulary in its metadata),
  // a Hugging Face folder or tokenizer.json, or a llama2.c tokenizer.bin.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);

  // Encodes UTF-8 text without BOS. With parse_special, occurrences of the
  // text of special/added tokens ("<|im_end|>") become their single ids; with
  // it off (the default for user text) they are tokenized as plain text.
  // Invalid UTF-8 is an InvalidArgument error naming the byte offset.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(
      std::string_view text, bool parse_special = false) const = 0;

  // Bytes of one token as it contributes to decoded text (may be a partial
  // UTF-8 sequence for byte tokens). Special tokens decode to their text.
  virtual std::string TokenBytes(int32_t id) const = 0;

  // Concatenated TokenBytes of all ids (may end in a partial UTF-8 sequence).
  virtual std::string Decode(absl::Span<const int32_t> ids) const;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when the vocabulary has none
  virtual int32_t eos_id() const = 0;  // -1 when the vocabulary has none
  // Ids that end generation (eos, <|im_end|>, <|eot_id|>, ...).
  virtual std::vector<int32_t> stop_ids() const = 0;
  // Whether the model expects BOS before the prompt.
  virtual bool add_bos() const = 0;
  // The model's chat template source (Jinja), empty when none is known.
  virtual const std::string& chat_template() const = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVER_TOKENIZER_TOKENIZER_H_
