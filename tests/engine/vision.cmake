# Images in (issue 19): decoding and preprocessing (engine/image), against
# fixtures from tests/tools/make_vision_fixtures.py (transformers' processor).
pdserve_add_test(NAME vision_image_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/vision_image_test.cc
  LIBS pdserve_image nlohmann_json::nlohmann_json)
pdserve_add_test(NAME vision_encoder_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/vision_encoder_test.cc
  LIBS pdserve_model pdserve_loader pdserve_image
       nlohmann_json::nlohmann_json)
pdserve_add_test(NAME vision_tokens_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/vision_tokens_test.cc
  LIBS pdserve_model nlohmann_json::nlohmann_json)
pdserve_add_test(NAME vision_lm_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/vision_lm_test.cc
  LIBS pdserve_model pdserve_loader pdserve_image
       nlohmann_json::nlohmann_json)
pdserve_add_test(NAME vision_engine_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/vision_engine_test.cc
  LIBS pdserve_engine_core pdserve_loader nlohmann_json::nlohmann_json)
