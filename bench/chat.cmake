# Chat template render harness (run through bench/chat_compare.py, which
# compares with transformers/jinja2 on the same conversation in one run).
add_executable(chat_template_bench ${CMAKE_CURRENT_LIST_DIR}/chat_template_bench.cc)
target_link_libraries(chat_template_bench PRIVATE pdserve_chat
  nlohmann_json::nlohmann_json)
