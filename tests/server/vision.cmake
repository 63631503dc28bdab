# Images in requests (issue 19): data: URLs, limits, the OpenAI / Anthropic
# image parts, and a chat request with images on the tiny VL fixture.
pdserve_add_test(NAME vision_request_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/vision_request_test.cc
  LIBS pdserve_frontend pdserve_loader nlohmann_json::nlohmann_json)
