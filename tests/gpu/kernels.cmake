# CUDA kernel tests (kernels/cuda): each kernel against the CPU reference in
# kernels/ and engine/model. Label gpu; every device test skips itself when
# no CUDA device is present (host-side precondition tests still run).
foreach(part elementwise matmul attention flash_attention sampling)
  pdserve_add_test(NAME kernels_${part}_test LABEL gpu
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/kernels_${part}_test.cc
    LIBS pdserve_cuda_kernels pdserve_model pdserve_kv pdserve_kernels)
endforeach()
