// Unicode property tables used by the tokenizers (generated data; see
// tests/tools/tokenizer_gen_unicode_tables.py). Plain constant arrays, sorted.
#ifndef PDSERVE_SERVER_TOKENIZER_UNICODE_DATA_H_
#define PDSERVE_SERVER_TOKENIZER_UNICODE_DATA_H_

#include <cstdint>

namespace pdserve::unicode_data {

// Canonical combining class `ccc` for code points first..last (inclusive).
struct CccRun {
  uint32_t first;
  uint32_t last;
  uint32_t ccc;
};
// Single-level canonical decomposition of `cp` (second == 0: a singleton).
// Bit 31 of `second` (kPrimaryComposite) is set when the pair composes back
// to `cp` under NFC (not a composition exclusion).
struct Decomposition {
  uint32_t cp;
  uint32_t first;
  uint32_t second;
};
inline constexpr uint32_t kPrimaryComposite = 0x80000000u;

extern const char kUnicodeVersion[];
// (start << 8 | flags); a run lasts until the next entry's start.
extern const uint32_t kFlagRuns[];
extern const int kFlagRunsSize;
extern const CccRun kCccRuns[];
extern const int kCccRunsSize;
extern const Decomposition kDecomp[];
extern const int kDecompSize;

}  // namespace pdserve::unicode_data

#endif  // PDSERVE_SERVER_TOKENIZER_UNICODE_DATA_H_
