// SentencePiece-style BPE: "▁" for spaces, merges by piece score, byte
// fallback to <0xNN> tokens (Llama-2, llama2.c tokenizer.bin).
#ifndef PDSERVE_SERVER_TOKENIZER_SPM_H_
#define PDSERVE_SERVER_TOKENIZER_SPM_H_

#include <memory>

#include "absl/status/statusor.h"
#include "server/tokenizer/tokenizer.h"

namespace pdserve {

struct VocabSpec;

// Builds a SentencePiece-style tokenizer from a kSentencePiece spec (scores
// required, one per token).
absl::StatusOr<std::unique_ptr<Tokenizer>> BuildSentencePieceTokenizer(
    VocabSpec spec);

}  // namespace pdserve

#endif  // PDSERVE_SERVER_TOKENIZER_SPM_H_
