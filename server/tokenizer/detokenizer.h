// Incremental detokenizer for streaming generation.
#ifndef PDSERVE_SERVER_TOKENIZER_DETOKENIZER_H_
#define PDSERVE_SERVER_TOKENIZER_DETOKENIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "server/tokenizer/tokenizer.h"

namespace pdserve {

// Turns a stream of token ids into text deltas.
//
// - A delta never splits a UTF-8 character: bytes of a character spread over
//   several tokens (byte fallback <0xE4><0xB8><0xAD>, byte-level BPE pieces
//   of CJK or emoji) are held until the character is complete. Bytes that
//   can never form a character become U+FFFD (one per maximal ill-formed
//   subpart, as unicode::ReplaceInvalidUtf8 does), so without stop strings
//   the deltas concatenate to ReplaceInvalidUtf8(tokenizer.Decode(ids,
//   skip_special_tokens)).
// - SentencePiece vocabularies: the leading space of the first non-special
//   token is dropped (strip_space_prefix), as Tokenizer::Decode does.
// - Stop strings are found even when they span tokens; the stop text and
//   everything after it is never emitted. Only the longest suffix of the
//   pending text that is a proper prefix of some stop string is held back.
// - Finish() flushes: an incomplete trailing UTF-8 sequence becomes U+FFFD.
//
// Not thread-safe (one per stream). The tokenizer must outlive it.
class Detokenizer {
 public:
  struct Options {
    std::vector<std::string> stop_strings;  // empty strings are ignored
    bool skip_special_tokens = true;  // control / added tokens emit nothing
    bool strip_space_prefix = true;   // see above; only with a space prefix
  };

  Detokenizer(const Tokenizer& tokenizer, Options options);

  // Feeds one token; returns the text that became final (maybe empty).
  // After a stop string was found, returns "" for every further token.
  std::string Feed(int32_t id);
  // Flushes whatever is held (call once, at the end of the stream).
  std::string Finish();

  bool stopped() const { return stop_index_ >= 0; }
  // Index into Options::stop_strings of the stop string found, or -1.
  int stop_index() const { return stop_index_; }

 private:
  // Moves complete characters from bytes_ to held_ (U+FFFD for ill-formed
  // bytes); at_end: an incomplete tail is ill-formed too.
  void DrainBytes(bool at_end);
  // Emits from held_ what no stop string can claim.
  std::string Release(bool at_end);

  const Tokenizer& tokenizer_;
  Options options_;
  bool first_text_;
  std::string bytes_;  // raw token bytes not yet forming whole characters
  std::string held_;   // valid UTF-8 waiting for stop-string decisions
  int stop_index_ = -1;
  size_t max_stop_len_ = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVER_TOKENIZER_DETOKENIZER_H_
