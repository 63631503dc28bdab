# Tokenizer tests (issue 3).
pdserve_add_test(NAME tokenizer_vocab_test LABEL unit
  SOURCES tokenizer_vocab_test.cc LIBS pdserve_tokenizer)
