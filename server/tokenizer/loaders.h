// Vocabulary loaders: GGUF metadata, Hugging Face tokenizer.json (+
// tokenizer_config.json beside it), llama2.c tokenizer.bin. Each returns a
// VocabSpec or an error naming the file, key and numbers involved.
#ifndef PDSERVE_SERVER_TOKENIZER_LOADERS_H_
#define PDSERVE_SERVER_TOKENIZER_LOADERS_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/tokenizer/vocab.h"

namespace pdserve {

class GgufFile;

// tokenizer.ggml.* keys: model gpt2 (byte-level BPE, pre-tokenizer from
// tokenizer.ggml.pre) or llama (SentencePiece); Unimplemented otherwise.
absl::StatusOr<VocabSpec> VocabFromGguf(const GgufFile& file);

// A tokenizer.json document with a BPE model: byte-level (ByteLevel /
// Split+ByteLevel / Digits+ByteLevel pre-tokenizers with the known regexes;
// NFC or no normaliser), or SentencePiece-style with byte_fallback (Metaspace
// pre-tokenizer, or the legacy Prepend("▁") + Replace(" ", "▁") normaliser;
// merge ranks become piece scores). Anything else is Unimplemented, naming
// the part. A TemplateProcessing post-processor that starts with a
// special token sets bos and add_bos. `config_json` is tokenizer_config.json's
// text or empty; its bos_token, eos_token, add_bos_token and chat_template
// take precedence.
absl::StatusOr<VocabSpec> VocabFromHfJson(std::string_view tokenizer_json,
                                          std::string_view config_json);

// llama2.c tokenizer.bin bytes: int32 max_token_length, then per token
// float32 score, int32 length, bytes; as many tokens as the file holds.
absl::StatusOr<VocabSpec> VocabFromLlama2c(std::string_view bytes);

}  // namespace pdserve

#endif  // PDSERVE_SERVER_TOKENIZER_LOADERS_H_
