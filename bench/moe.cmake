# Qwen3 MoE decode benchmark: tokens/s at batch 1 and 8 on a small random
# MoE model, with expert matrices read per step. Prints JSON lines.
add_executable(moe_bench ${CMAKE_CURRENT_LIST_DIR}/moe_bench.cc)
target_link_libraries(moe_bench PRIVATE pdserve_model pdserve_bench_flags pdserve_bench_probe
  absl::strings)
