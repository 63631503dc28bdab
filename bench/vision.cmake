# Images in (issue 19): vision-encoder time per image (448x448, 1024x1024;
# 1 and 2 threads) and its share of time to first token, on a random model
# with Qwen3.5-4B's shapes. Prints JSON lines.
find_package(PNG REQUIRED)
add_executable(vision_bench ${CMAKE_CURRENT_LIST_DIR}/vision_bench.cc)
target_link_libraries(vision_bench PRIVATE pdserve_engine_core
  pdserve_bench_flags PNG::PNG absl::strings)
