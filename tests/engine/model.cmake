# Tests for engine/model (forward pass, sampler) and the HF parity fixtures.
pdserve_add_test(NAME model_forward_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_forward_test.cc
  LIBS pdserve_model)
pdserve_add_test(NAME attention_tiled_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/attention_tiled_test.cc
  LIBS pdserve_model)
pdserve_add_test(NAME model_alloc_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_alloc_test.cc ${CMAKE_SOURCE_DIR}/tests/common/counting_allocator.cc
  LIBS pdserve_model)
pdserve_add_test(NAME model_sampler_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_sampler_test.cc
  LIBS pdserve_model)
pdserve_add_test(NAME model_parity_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_parity_test.cc
  LIBS pdserve_model pdserve_loader nlohmann_json::nlohmann_json)
pdserve_add_test(NAME model_generate_cli_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_generate_cli_test.cc
          ${CMAKE_SOURCE_DIR}/tests/common/cli_run.cc
  LIBS nlohmann_json::nlohmann_json)
add_dependencies(model_generate_cli_test pdserve)
pdserve_add_test(NAME model_counter_rng_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_counter_rng_test.cc
  LIBS pdserve_model)
