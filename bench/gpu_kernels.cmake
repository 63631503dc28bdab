# CUDA kernel micro-benchmarks (kernels/cuda): decode attention HBM fraction
# at 4K / 32K context, bf16 mat-vec bandwidth, prefill attention TFLOP/s,
# cuBLAS bf16 GEMM and sampling times. Prints one JSON object per line; skips
# (exit 0, a "skipped" line) without a device.
if(PDSERVE_HAVE_CUDA AND TARGET pdserve_cuda_kernels)
  add_executable(gpu_kernels_bench
    ${CMAKE_CURRENT_LIST_DIR}/gpu_kernels_bench.cc)
  target_link_libraries(gpu_kernels_bench PRIVATE pdserve_cuda_kernels pdserve_bench_flags)
endif()
