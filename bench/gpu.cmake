# GPU benchmarks of the CUDA runner (kernels/cuda/plugin): decode step time
# and HBM bandwidth, prefill TFLOP/s, on a random Qwen3-4B-shaped bf16 model.
# Prints JSON. Built only with CUDA (nvcc found); needs a device to run.
if(PDSERVE_HAVE_CUDA AND TARGET pdserve_cuda_runner)
  add_executable(gpu_decode_bench ${CMAKE_CURRENT_LIST_DIR}/gpu_decode_bench.cc)
  target_link_libraries(gpu_decode_bench PRIVATE pdserve_cuda_runner
    absl::strings)
endif()
