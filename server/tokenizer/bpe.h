// Byte-level BPE (GPT-2 byte<->unicode mapping, merges applied by rank).
#ifndef PDSERVE_SERVER_TOKENIZER_BPE_H_
#define PDSERVE_SERVER_TOKENIZER_BPE_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/tokenizer/tokenizer.h"

namespace pdserve {

struct VocabSpec;

// GPT-2's printable stand-in for byte `b` ("Ġ" for 0x20), as UTF-8.
std::string ByteToUnicode(uint8_t b);
// Raw bytes of a byte-level token text ("Ġthe" -> " the"); characters
// outside the mapping are kept as their UTF-8.
std::string ByteLevelDecode(std::string_view text);

// Builds a byte-level BPE tokenizer from a kByteLevelBpe spec.
absl::StatusOr<std::unique_ptr<Tokenizer>> BuildByteLevelBpeTokenizer(
    VocabSpec spec);

}  // namespace pdserve

#endif  // PDSERVE_SERVER_TOKENIZER_BPE_H_
