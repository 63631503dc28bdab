# The HTTP API: the Beast server on loopback, the pure OpenAI / Anthropic
# translation, and (integration) a real `pdserve serve` driven by the
# official openai / anthropic SDKs (skipped, exit 77, without their venv).
pdserve_add_test(NAME http_server_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/http_server_test.cc
  LIBS pdserve_http)
pdserve_add_test(NAME http_api_translate_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/http_api_translate_test.cc
  LIBS pdserve_frontend)
pdserve_add_test(NAME http_api_tools_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/http_api_tools_test.cc
  LIBS pdserve_frontend)
add_test(NAME http_api_sdk_test
  COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/integration/http_api_test.py
          --pdserve $<TARGET_FILE:pdserve>)
set_tests_properties(http_api_sdk_test PROPERTIES
  LABELS integration RESOURCE_LOCK pdserve_processes SKIP_RETURN_CODE 77 TIMEOUT 600)
# Structured output and tool calls (issue 15) through the same SDKs.
add_test(NAME structured_output_sdk_test
  COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/integration/structured_output_test.py
          --pdserve $<TARGET_FILE:pdserve>)
set_tests_properties(structured_output_sdk_test PROPERTIES
  LABELS integration RESOURCE_LOCK pdserve_processes SKIP_RETURN_CODE 77 TIMEOUT 900)
