# The cell router's prefix-hit rate against round-robin on a multi-turn
# trace, replayed through its pure code with a model of each cell's prefix
# cache. Prints JSON.
add_executable(router_replay ${CMAKE_CURRENT_LIST_DIR}/router_replay.cc)
target_link_libraries(router_replay PRIVATE pdserve_frontend pdserve_bench_flags
  nlohmann_json::nlohmann_json absl::strings absl::flat_hash_map)
