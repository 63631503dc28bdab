# Serving benchmark over the three processes (chunked-prefill ITL ratio,
# streamed vs engine tok/s). Prints JSON. Reuses the integration harness.
add_executable(serve_bench ${CMAKE_CURRENT_LIST_DIR}/serve_bench.cc)
target_link_libraries(serve_bench PRIVATE pdserve_serve_harness pdserve_bench_flags
  nlohmann_json::nlohmann_json absl::strings)
target_compile_definitions(serve_bench PRIVATE
  PDSERVE_SHARED_DIR="${PDSERVE_SHARED_DIR}"
  PDSERVE_BINARY_DIR="${CMAKE_BINARY_DIR}")
add_dependencies(serve_bench pdserve)
