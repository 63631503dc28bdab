# Tests for engine/backend: DeviceSpec, the CPU backend, the plugin loader and
# the plugin route end to end through a test plugin (a shared library that
# implements plugin_abi.h on the CPU), so no GPU is needed.
# The test plugin and two broken variants (loaded with dlopen, never linked).
add_library(pdserve_test_plugin MODULE
  ${CMAKE_CURRENT_LIST_DIR}/backend_test_plugin.cc)
target_link_libraries(pdserve_test_plugin PRIVATE pdserve_backend)
add_library(pdserve_test_plugin_badabi MODULE
  ${CMAKE_CURRENT_LIST_DIR}/backend_test_plugin.cc)
target_link_libraries(pdserve_test_plugin_badabi PRIVATE pdserve_backend)
target_compile_definitions(pdserve_test_plugin_badabi PRIVATE
  PDSERVE_TEST_PLUGIN_ABI=999)
add_library(pdserve_test_plugin_badlayout MODULE
  ${CMAKE_CURRENT_LIST_DIR}/backend_test_plugin.cc)
target_link_libraries(pdserve_test_plugin_badlayout PRIVATE pdserve_backend)
target_compile_definitions(pdserve_test_plugin_badlayout PRIVATE
  PDSERVE_TEST_PLUGIN_FINGERPRINT=12345)
add_library(pdserve_test_not_plugin MODULE
  ${CMAKE_CURRENT_LIST_DIR}/backend_test_not_plugin.cc)
set(_plugin_defs
  PDSERVE_TEST_PLUGIN="$<TARGET_FILE:pdserve_test_plugin>"
  PDSERVE_TEST_PLUGIN_BADABI="$<TARGET_FILE:pdserve_test_plugin_badabi>"
  PDSERVE_TEST_PLUGIN_BADLAYOUT="$<TARGET_FILE:pdserve_test_plugin_badlayout>"
  PDSERVE_TEST_NOT_PLUGIN="$<TARGET_FILE:pdserve_test_not_plugin>")
set(_plugins pdserve_test_plugin pdserve_test_plugin_badabi
  pdserve_test_plugin_badlayout pdserve_test_not_plugin)

pdserve_add_test(NAME backend_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/backend_test.cc
  LIBS pdserve_backend pdserve_loader)
target_compile_definitions(backend_test PRIVATE ${_plugin_defs})
add_dependencies(backend_test ${_plugins})

pdserve_add_test(NAME backend_engine_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/backend_engine_test.cc
  LIBS pdserve_engine_core pdserve_loader)
target_compile_definitions(backend_engine_test PRIVATE ${_plugin_defs})
add_dependencies(backend_engine_test ${_plugins})

pdserve_add_test(NAME backend_cli_test LABEL integration
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/backend_cli_test.cc
          ${CMAKE_SOURCE_DIR}/tests/common/cli_run.cc)
target_compile_definitions(backend_cli_test PRIVATE ${_plugin_defs})
add_dependencies(backend_cli_test pdserve ${_plugins})

# The loader with no plugin anywhere it looks, even in a build that made
# libpdserve_cuda.so: its own copy of backend_loader.cc (compiled without
# PDSERVE_BUILD_PLUGIN_DIR; the object given here wins over the archive's)
# in a folder of its own.
pdserve_add_test(NAME backend_missing_plugin_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/backend_missing_plugin_test.cc
          ${CMAKE_SOURCE_DIR}/engine/backend/backend_loader.cc
  LIBS pdserve_backend)
set_target_properties(backend_missing_plugin_test PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/no_plugin)
