// The grammar vocabulary of a tokenizer (engine/grammar/grammar.h): each token's bytes,
// special tokens emptied (never produced by a grammar), the tokenizer's stop
// ids as the grammar's end. Pure.
#ifndef PDSERVE_SERVER_TOKENIZER_GRAMMAR_VOCABULARY_H_
#define PDSERVE_SERVER_TOKENIZER_GRAMMAR_VOCABULARY_H_

#include <cstdint>

#include "engine/grammar/grammar.h"
#include "server/tokenizer/tokenizer.h"

namespace pdserve::grammar {

// `vocab_size` >= the tokenizer's (a model's padded vocabulary): the extra
// ids are special (empty). 0 = the tokenizer's size.
GrammarVocabulary VocabularyOf(const Tokenizer& tokenizer, int32_t vocab_size = 0);

}  // namespace pdserve::grammar

#endif  // PDSERVE_SERVER_TOKENIZER_GRAMMAR_VOCABULARY_H_
