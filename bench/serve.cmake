# Serving benchmark over the three processes (chunked-prefill ITL ratio,
# streamed vs engine tok/s). Prints JSON. Reuses the integration harness.
add_executable(serve_bench ${CMAKE_CURRENT_LIST_DIR}/serve_bench.cc)
target_link_libraries(serve_bench PRIVATE pdserve_serve_harness pdserve_bench_flags
  nlohmann_json::nlohmann_json absl::strings)
target_compile_definitions(serve_bench PRIVATE
  PDSERVE_SHARED_DIR="${PDSERVE_SHARED_DIR}"
  PDSERVE_BINARY_DIR="${CMAKE_BINARY_DIR}")
add_dependencies(serve_bench pdserve)

# What a crash costs a stream: stalls p50/p99 when the engine or the
# scheduler is killed under 64 streams, tokens recomputed. Prints JSON.
add_executable(recovery_bench ${CMAKE_CURRENT_LIST_DIR}/recovery_bench.cc)
target_link_libraries(recovery_bench PRIVATE pdserve_serve_harness
  pdserve_bench_flags nlohmann_json::nlohmann_json absl::strings)
target_compile_definitions(recovery_bench PRIVATE
  PDSERVE_SHARED_DIR="${PDSERVE_SHARED_DIR}"
  PDSERVE_BINARY_DIR="${CMAKE_BINARY_DIR}")
add_dependencies(recovery_bench pdserve)

# Prefill/decode split vs one cell: decode p99 ITL of 16 streams while
# 2,048-token prompts keep arriving, as a ratio. Prints JSON.
add_executable(pd_bench ${CMAKE_CURRENT_LIST_DIR}/pd_bench.cc)
target_link_libraries(pd_bench PRIVATE pdserve_serve_harness
  pdserve_bench_flags pdserve_cluster_simulator nlohmann_json::nlohmann_json absl::strings)
target_compile_definitions(pd_bench PRIVATE
  PDSERVE_SHARED_DIR="${PDSERVE_SHARED_DIR}"
  PDSERVE_BINARY_DIR="${CMAKE_BINARY_DIR}")
add_dependencies(pd_bench pdserve)
