# Grammar-constrained decoding (issue 15): compiled constraints and matchers
# over real vocabularies (the shared GPT-2 vocabulary GGUF).
pdserve_add_test(NAME grammar_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/grammar_test.cc
  LIBS pdserve_grammar_vocab nlohmann_json::nlohmann_json)
