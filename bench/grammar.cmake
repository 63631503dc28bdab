# Constrained decoding (issue 15): step time of constrained vs free streams
# (ratio), and a 50-property schema's compile time, first and cached.
add_executable(grammar_bench ${CMAKE_CURRENT_LIST_DIR}/grammar_bench.cc)
target_link_libraries(grammar_bench PRIVATE pdserve_engine_core pdserve_loader
  pdserve_grammar_vocab pdserve_bench_flags nlohmann_json::nlohmann_json)
