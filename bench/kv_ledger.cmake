# KV ledger: sequences admitted at once from a fixed pool when 32 requests
# share a 1,536-token system prompt, before vs after (the pure policy, and
# the real processes). Prints JSON.
add_executable(kv_ledger_bench ${CMAKE_CURRENT_LIST_DIR}/kv_ledger_bench.cc)
target_link_libraries(kv_ledger_bench PRIVATE pdserve_scheduler_policy
  pdserve_serve_harness pdserve_bench_flags nlohmann_json::nlohmann_json
  absl::strings)
target_compile_definitions(kv_ledger_bench PRIVATE
  PDSERVE_SHARED_DIR="${PDSERVE_SHARED_DIR}"
  PDSERVE_BINARY_DIR="${CMAKE_BINARY_DIR}")
add_dependencies(kv_ledger_bench pdserve)
