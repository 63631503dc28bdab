// UTF-8 and Unicode helpers for the tokenizers: validation, decoding,
// code point classes (\p{L}, \p{M}, \p{N}, \s) and NFC normalisation. Pure
// functions over immutable tables; thread-safe. Classes follow Unicode 16.0;
// NFC follows the reference `tokenizers` normaliser, whose older tables give
// marks and composites added since Unicode 9 no class or decomposition (the
// vocabularies were built with it).
#ifndef PDSERVE_SERVER_TOKENIZER_UNICODE_H_
#define PDSERVE_SERVER_TOKENIZER_UNICODE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace pdserve::unicode {

// Class bits returned by Flags().
enum : uint8_t {
  kLetter = 1,     // general category L*
  kNumber = 2,     // general category N*
  kSpace = 4,      // White_Space property (what \s matches)
  kNfcUnsafe = 8,  // may change under NFC (ccc != 0 or NFC_QC No/Maybe)
  kMark = 16,      // general category M* (combining marks)
};

// Class bits of code point `cp` (0 for unassigned or out of range).
uint8_t Flags(uint32_t cp);

// Decodes one code point from valid UTF-8 at `p`; returns its byte length.
// Precondition: the input was checked by ValidateUtf8.
inline int DecodeValid(const char* p, uint32_t* cp) {
  const uint8_t b0 = static_cast<uint8_t>(p[0]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  if (b0 < 0xE0) {
    *cp = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(p[1]) & 0x3Fu);
    return 2;
  }
  if (b0 < 0xF0) {
    *cp = ((b0 & 0x0Fu) << 12) | ((static_cast<uint8_t>(p[1]) & 0x3Fu) << 6) |
          (static_cast<uint8_t>(p[2]) & 0x3Fu);
    return 3;
  }
  *cp = ((b0 & 0x07u) << 18) | ((static_cast<uint8_t>(p[1]) & 0x3Fu) << 12) |
        ((static_cast<uint8_t>(p[2]) & 0x3Fu) << 6) |
        (static_cast<uint8_t>(p[3]) & 0x3Fu);
  return 4;
}

// Length of the well-formed UTF-8 sequence starting at text[pos], or 0 when
// the bytes there are not one (overlong forms, surrogates, code points above
// U+10FFFF, stray continuation bytes and truncated sequences are rejected).
int ValidSequenceLength(std::string_view text, size_t pos);

// As ValidSequenceLength; when it returns 0, *subpart is the length of the
// maximal prefix of a well-formed sequence there (at least 1 byte): the
// unit one U+FFFD replaces.
int ExamineUtf8(std::string_view text, size_t pos, size_t* subpart);

// OK, or InvalidArgument "invalid UTF-8 at byte offset N (byte 0xXX)".
absl::Status ValidateUtf8(std::string_view text);

// Appends the UTF-8 encoding of `cp` (<= U+10FFFF) to `out`.
void AppendUtf8(uint32_t cp, std::string* out);

// Replaces every ill-formed sequence in `bytes` with U+FFFD (one per
// maximal invalid subpart, as the Unicode standard recommends).
std::string ReplaceInvalidUtf8(std::string_view bytes);

// Whether valid UTF-8 `text` is certainly already in NFC (a quick check; a
// false answer means "maybe not").
bool IsNfcQuick(std::string_view text);

// NFC normalisation of valid UTF-8 `text`.
std::string ToNfc(std::string_view text);

}  // namespace pdserve::unicode

#endif  // PDSERVE_SERVER_TOKENIZER_UNICODE_H_
