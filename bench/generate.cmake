# Generation throughput (prefill / batch-1 decode tok/s as JSON); compared
# with llama.cpp by bench/llamacpp_compare.py.
add_executable(generate_bench ${CMAKE_CURRENT_LIST_DIR}/generate_bench.cc)
target_link_libraries(generate_bench PRIVATE pdserve_model pdserve_loader
  nlohmann_json::nlohmann_json absl::strings)
# Measured limits of this CPU (read bandwidth, fp32 FMA / int8 / VNNI / bf16
# peaks) for bench/cpu_compare.py's fractions; JSON on stdout.
add_executable(peak_bench ${CMAKE_CURRENT_LIST_DIR}/peak_bench.cc)
target_link_libraries(peak_bench PRIVATE pdserve_metrics pdserve_bench_probe
  nlohmann_json::nlohmann_json absl::strings Threads::Threads)
