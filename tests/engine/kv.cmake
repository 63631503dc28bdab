# Tests for engine/kv (KV pool, sequence state) and engine/core (EngineCore).
pdserve_add_test(NAME kv_sequence_state_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_sequence_state_test.cc
  LIBS pdserve_kv)
pdserve_add_test(NAME kv_pool_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_pool_test.cc
  LIBS pdserve_kv)
pdserve_add_test(NAME prefix_cache_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/prefix_cache_test.cc
  LIBS pdserve_kv)
pdserve_add_test(NAME engine_core_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_core_test.cc
  LIBS pdserve_engine_core pdserve_loader)
pdserve_add_test(NAME engine_prefix_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_prefix_test.cc
  LIBS pdserve_engine_core pdserve_loader)
pdserve_add_test(NAME engine_core_alloc_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_core_alloc_test.cc ${CMAKE_SOURCE_DIR}/tests/common/counting_allocator.cc
  LIBS pdserve_engine_core)
# Guided decoding in the engine step (issue 15): grammar masks in batched
# sampling, the masked sampler, the reasoning budget.
pdserve_add_test(NAME engine_guide_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_guide_test.cc
  LIBS pdserve_engine_core pdserve_grammar nlohmann_json::nlohmann_json)
pdserve_add_test(NAME kv_ledger_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_ledger_test.cc
  LIBS pdserve_kv)
pdserve_add_test(NAME engine_resume_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_resume_test.cc
  LIBS pdserve_engine_core pdserve_loader)
# Prefill/decode hand-off (issue 17): export, import, the capacity contract.
pdserve_add_test(NAME engine_handoff_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_handoff_test.cc
  LIBS pdserve_engine_core pdserve_loader nlohmann_json::nlohmann_json)
pdserve_add_test(NAME handoff_shm_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/handoff_shm_test.cc
  LIBS pdserve_engine_service)
