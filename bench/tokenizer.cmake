# Tokenizer throughput harness (run it through bench/tokenizer_compare.py,
# which compares with the PyPI `tokenizers` package in the same run).
add_executable(tokenizer_bench ${CMAKE_CURRENT_LIST_DIR}/tokenizer_bench.cc)
target_link_libraries(tokenizer_bench PRIVATE pdserve_tokenizer pdserve_bench_flags
  nlohmann_json::nlohmann_json)
