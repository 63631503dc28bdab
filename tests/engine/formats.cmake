# Tests for engine/formats (GGUF / safetensors / llama2.c readers, GGUF
# writer) and engine/loader.
pdserve_add_test(NAME formats_gguf_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/formats_gguf_test.cc
  LIBS pdserve_formats)
pdserve_add_test(NAME loader_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/loader_test.cc
  LIBS pdserve_loader)
pdserve_add_test(NAME formats_safetensors_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/formats_safetensors_test.cc
  LIBS pdserve_loader)
pdserve_add_test(NAME formats_requantize_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/formats_requantize_test.cc
  LIBS pdserve_loader)
