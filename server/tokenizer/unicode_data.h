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
struct Decomposition {
  uint32_t cp;
  uint32_t first;
  uint32_t second;
};
// Primary composite of the pair (first, second).
struct Composition {
  uint32_t first;
  uint32_t second;
  uint32_t composite;
};

extern const char kUnicodeVersion[];
// (start << 8 | flags); a run lasts until the next entry's start.
extern const uint32_t kFlagRuns[];
extern const int kFlagRunsSize;
extern const CccRun kCccRuns[];
extern const int kCccRunsSize;
extern const Decomposition kDecomp[];
extern const int kDecompSize;
extern const Composition kCompose[];
extern const int kComposeSize;

}  // namespace pdserve::unicode_data

#endif  // PDSERVE_SERVER_TOKENIZER_UNICODE_DATA_H_
