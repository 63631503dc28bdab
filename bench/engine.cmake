# Engine step benchmarks (engine/core): aggregate decode throughput by batch
# size and KV pool resident memory. Prints JSON lines.
add_executable(engine_decode_bench ${CMAKE_CURRENT_LIST_DIR}/engine_decode_bench.cc)
target_link_libraries(engine_decode_bench PRIVATE pdserve_engine_core pdserve_loader
  absl::strings)
