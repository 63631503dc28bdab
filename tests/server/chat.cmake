# Chat templates (issue 3, item 3): golden tests against transformers'
# apply_chat_template (fixtures from tests/tools/chat_make_goldens.py),
# interpreter unit tests, ChatTemplate API / property / limit tests.
pdserve_add_test(NAME chat_golden_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/chat_golden_test.cc
  LIBS pdserve_chat nlohmann_json::nlohmann_json)
pdserve_add_test(NAME chat_jinja_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/chat_jinja_test.cc
  LIBS pdserve_chat)
pdserve_add_test(NAME chat_output_parser_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/chat_output_parser_test.cc
  LIBS pdserve_chat nlohmann_json::nlohmann_json)
pdserve_add_test(NAME chat_template_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/chat_template_test.cc
  LIBS pdserve_chat Threads::Threads)
# RenderSegments encoded with the pdserve tokenizer vs transformers'
# sanitize_control_tokens ids (needs the tokenizer library).
pdserve_add_test(NAME chat_sanitize_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/chat_sanitize_test.cc
  LIBS pdserve_chat pdserve_tokenizer nlohmann_json::nlohmann_json)
