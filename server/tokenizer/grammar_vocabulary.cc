#include "server/tokenizer/grammar_vocabulary.h"

#include <algorithm>

namespace pdserve::grammar {

GrammarVocabulary VocabularyOf(const Tokenizer& tok, int32_t vocab_size) {
  GrammarVocabulary v;
  const int32_t n = std::max(vocab_size, tok.vocab_size());
  v.token_bytes.resize(static_cast<size_t>(n));
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (!tok.IsSpecial(id)) v.token_bytes[id] = tok.TokenBytes(id);
  }
  v.stop_ids = tok.stop_ids();
  return v;
}

}  // namespace pdserve::grammar
