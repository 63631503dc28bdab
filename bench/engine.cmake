# Engine step benchmarks (engine/kv): aggregate decode throughput by batch
# size and KV pool resident memory. Prints JSON lines.
if(TARGET pdserve_kv AND TARGET pdserve_model AND TARGET pdserve_loader)
  add_executable(engine_decode_bench ${CMAKE_CURRENT_LIST_DIR}/engine_decode_bench.cc)
  target_link_libraries(engine_decode_bench PRIVATE pdserve_kv pdserve_loader
    absl::strings)
endif()
