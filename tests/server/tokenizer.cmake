# Tokenizer tests (issue 3).
pdserve_add_test(NAME tokenizer_vocab_test LABEL unit
  SOURCES tokenizer_vocab_test.cc LIBS pdserve_tokenizer)
pdserve_add_test(NAME tokenizer_reference_test LABEL unit
  SOURCES tokenizer_reference_test.cc
  LIBS pdserve_tokenizer nlohmann_json::nlohmann_json)
pdserve_add_test(NAME tokenizer_unicode_test LABEL unit
  SOURCES tokenizer_unicode_test.cc
  LIBS pdserve_tokenizer nlohmann_json::nlohmann_json)
pdserve_add_test(NAME tokenizer_property_test LABEL unit
  SOURCES tokenizer_property_test.cc LIBS pdserve_tokenizer)
pdserve_add_test(NAME tokenizer_detokenizer_test LABEL unit
  SOURCES tokenizer_detokenizer_test.cc LIBS pdserve_tokenizer)
pdserve_add_test(NAME tokenizer_cli_test LABEL unit
  SOURCES tokenizer_cli_test.cc
          ${CMAKE_SOURCE_DIR}/server/cli/tokenize_command.cc
  LIBS pdserve_tokenizer)
pdserve_add_test(NAME tokenizer_synthetic_test LABEL unit
  SOURCES tokenizer_synthetic_test.cc LIBS pdserve_tokenizer pdserve_formats)
pdserve_add_test(NAME tokenizer_qwen35_test LABEL unit
  SOURCES tokenizer_qwen35_test.cc
  LIBS pdserve_tokenizer pdserve_formats nlohmann_json::nlohmann_json)
