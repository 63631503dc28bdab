# Unit tests for the CPU kernels (kernels/): every dtype x SIMD level this
# CPU supports, batch invariance, thread pool, conversions and ops.
pdserve_add_test(NAME kernels_test LABEL unit
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/alloc_test.cc ${CMAKE_SOURCE_DIR}/tests/common/counting_allocator.cc
    ${CMAKE_CURRENT_LIST_DIR}/dtype_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_grouped_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_packed_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/ops_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/thread_pool_test.cc
  LIBS pdserve_kernels)

# The same suites with the SIMD level forced down through PDSERVE_ISA (the
# public MatMul/ops entry points then run the lower level).
foreach(isa scalar avx2)
  add_test(NAME kernels_test_isa_${isa}
    COMMAND kernels_test --gtest_filter=MatMulTest.*:MatMulPackedTest.*:OpsTest.*:AllocationTest.*)
  set_tests_properties(kernels_test_isa_${isa} PROPERTIES
    LABELS unit ENVIRONMENT PDSERVE_ISA=${isa} TIMEOUT 300)
endforeach()

# TSan builds (scripts/sanitize.sh tsan): the thread pool suite alone, since
# kernels_test's counting allocator replaces operator new, which the TSan
# runtime also defines.
if(PDSERVE_SANITIZE MATCHES "thread")
  add_executable(thread_pool_tsan_test ${CMAKE_CURRENT_LIST_DIR}/thread_pool_test.cc)
  target_link_libraries(thread_pool_tsan_test PRIVATE pdserve_kernels
    GTest::gtest GTest::gtest_main GTest::gmock)
endif()
