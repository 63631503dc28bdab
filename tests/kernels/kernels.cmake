# Unit tests for the CPU kernels (kernels/): every dtype x SIMD level this
# CPU supports, batch invariance, thread pool, conversions and ops.
pdserve_add_test(NAME kernels_test LABEL unit
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/alloc_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/dtype_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/ops_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/thread_pool_test.cc
  LIBS pdserve_kernels)
