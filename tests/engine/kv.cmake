# Tests for engine/kv (KV pool, sequence state, engine step executor).
if(TARGET pdserve_kv)
  pdserve_add_test(NAME kv_sequence_state_test LABEL unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_sequence_state_test.cc
    LIBS pdserve_kv)
  pdserve_add_test(NAME kv_pool_test LABEL unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_pool_test.cc
    LIBS pdserve_kv)
  pdserve_add_test(NAME prefix_cache_test LABEL unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/prefix_cache_test.cc
    LIBS pdserve_kv)
endif()
if(TARGET pdserve_kv AND TARGET pdserve_model AND TARGET pdserve_loader)
  pdserve_add_test(NAME engine_core_test LABEL unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_core_test.cc
    LIBS pdserve_kv pdserve_loader)
  pdserve_add_test(NAME engine_prefix_test LABEL unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_prefix_test.cc
    LIBS pdserve_kv pdserve_loader)
  pdserve_add_test(NAME engine_core_alloc_test LABEL unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_core_alloc_test.cc ${CMAKE_SOURCE_DIR}/tests/common/counting_allocator.cc
    LIBS pdserve_kv)
endif()
