# Generation throughput (prefill / batch-1 decode tok/s as JSON); compared
# with llama.cpp by bench/llamacpp_compare.py.
if(TARGET pdserve_model AND TARGET pdserve_loader)
  add_executable(generate_bench ${CMAKE_CURRENT_LIST_DIR}/generate_bench.cc)
  target_link_libraries(generate_bench PRIVATE pdserve_model pdserve_loader
    nlohmann_json::nlohmann_json absl::strings)
endif()
