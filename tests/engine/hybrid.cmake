# Tests for Qwen3 MoE and the hybrid linear-attention models (engine/model
# moe.*, gated_deltanet.*), against fixtures from
# tests/tools/make_hybrid_fixtures.py.
pdserve_add_test(NAME hybrid_moe_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/hybrid_moe_test.cc
  LIBS pdserve_model pdserve_loader pdserve_formats
       nlohmann_json::nlohmann_json)
pdserve_add_test(NAME hybrid_qwen35_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/hybrid_qwen35_test.cc
  LIBS pdserve_model pdserve_loader nlohmann_json::nlohmann_json)
pdserve_add_test(NAME hybrid_engine_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/hybrid_engine_test.cc
  LIBS pdserve_engine_core pdserve_model pdserve_loader nlohmann_json::nlohmann_json)
pdserve_add_test(NAME hybrid_qwen3next_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/hybrid_qwen3next_test.cc
  LIBS pdserve_model pdserve_loader nlohmann_json::nlohmann_json)
pdserve_add_test(NAME hybrid_alloc_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/hybrid_alloc_test.cc ${CMAKE_SOURCE_DIR}/tests/common/counting_allocator.cc
  LIBS pdserve_model pdserve_loader nlohmann_json::nlohmann_json)
pdserve_add_test(NAME hybrid_gguf_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/hybrid_gguf_test.cc
  LIBS pdserve_model pdserve_loader pdserve_formats
       nlohmann_json::nlohmann_json)
