# CPU kernel micro-benchmarks (Google Benchmark): mat-vec GB/s of weight bytes,
# GEMM GFLOP/s for SmolLM2 shapes per dtype and thread count, next to a
# memory-bandwidth probe so the figures read as a fraction of the machine's.
add_executable(kernels_bench ${CMAKE_CURRENT_LIST_DIR}/kernels_matmul_bench.cc)
target_link_libraries(kernels_bench PRIVATE pdserve_kernels benchmark::benchmark)
