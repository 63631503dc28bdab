# The gpu tests run on the CPU through the CUDA emulator (tests/tools/
# cuda_emu): the SAME sources as kernels_*_test / model_cuda*_test, linked
# against g++-compiled, emulated copies of the CUDA kernels and runner instead
# of cudart / cuBLAS. The emulator reports one device, so nothing skips for
# lack of a GPU (a "no CUDA device" skip fails the test). Label unit.
#   pdserve_emu_cuda   transformed kernels/cuda/src/*.cu + plugin_kernels.cu,
#                      the runner's .cc files and the emulated runtime/cuBLAS
#   emu_<test>         one ctest test per suite, slow cases filtered out
# Built at -O1 without -g to keep CI time down. Option PDSERVE_CUDA_EMU.
option(PDSERVE_CUDA_EMU "Run the gpu tests on the CPU CUDA emulator" ON)
find_package(Python3 COMPONENTS Interpreter)
if(NOT PDSERVE_CUDA_EMU OR NOT Python3_FOUND
   OR NOT CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  return()
endif()

set(_emu_dir ${CMAKE_SOURCE_DIR}/tests/tools/cuda_emu)
set(_emu_gen ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu_src)
file(GLOB _emu_cu CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/cuda/src/*.cu
     ${CMAKE_SOURCE_DIR}/kernels/cuda/plugin/*.cu)
file(GLOB _emu_cuh ${CMAKE_SOURCE_DIR}/kernels/cuda/src/*.cuh)
set(_emu_generated)
foreach(cu ${_emu_cu})
  get_filename_component(_name ${cu} NAME_WE)
  set(_out ${_emu_gen}/${_name}.cc)
  add_custom_command(OUTPUT ${_out}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${_emu_gen}
    COMMAND ${Python3_EXECUTABLE} ${_emu_dir}/transform.py ${cu} ${_out}
    DEPENDS ${cu} ${_emu_dir}/transform.py
    COMMENT "cuda_emu: transforming ${_name}.cu" VERBATIM)
  list(APPEND _emu_generated ${_out})
endforeach()
set_source_files_properties(${_emu_generated} PROPERTIES
  COMPILE_OPTIONS "-include;${_emu_dir}/emu.h;-w"
  OBJECT_DEPENDS "${_emu_dir}/emu.h;${_emu_cuh}")

file(GLOB _emu_runner CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/kernels/cuda/plugin/*.cc)
list(FILTER _emu_runner EXCLUDE REGEX "plugin_entry\\.cc$")
add_library(pdserve_emu_cuda STATIC ${_emu_generated} ${_emu_runner}
  ${_emu_dir}/emu.cc ${_emu_dir}/runtime.cc ${_emu_dir}/cublas_emu.cc)
target_include_directories(pdserve_emu_cuda PRIVATE ${_emu_dir})
target_include_directories(pdserve_emu_cuda SYSTEM PUBLIC
  ${CUDAToolkit_INCLUDE_DIRS})
target_compile_options(pdserve_emu_cuda PRIVATE -O1 -g0)
find_package(Threads REQUIRED)
target_link_libraries(pdserve_emu_cuda PUBLIC
  absl::status absl::statusor absl::strings absl::span
  Threads::Threads ${CMAKE_DL_LIBS})

# pdserve_add_emu_test(TEST kernels_attention_test [FILTER gtest-filter]
#                      LIBS ...): emu_<TEST> from tests/gpu/<TEST>.cc.
function(pdserve_add_emu_test)
  cmake_parse_arguments(E "" "TEST;FILTER;TIMEOUT" "LIBS" ${ARGN})
  set(_t emu_${E_TEST})
  add_executable(${_t} ${CMAKE_CURRENT_LIST_DIR}/${E_TEST}.cc)
  target_compile_options(${_t} PRIVATE -O1 -g0)
  target_link_libraries(${_t} PRIVATE pdserve_emu_cuda ${E_LIBS}
    GTest::gtest GTest::gtest_main GTest::gmock)
  target_compile_definitions(${_t} PRIVATE
    PDSERVE_SHARED_DIR="${PDSERVE_SHARED_DIR}"
    PDSERVE_TESTDATA_DIR="${PDSERVE_TESTDATA_DIR}"
    PDSERVE_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    PDSERVE_BINARY_DIR="${CMAKE_BINARY_DIR}")
  set(_args)
  if(E_FILTER)
    set(_args --gtest_filter=${E_FILTER})
  endif()
  add_test(NAME ${_t} COMMAND ${_t} ${_args})
  if(NOT E_TIMEOUT)
    set(E_TIMEOUT 600)
  endif()
  # EMU VIOLATION: a CUDA API misuse the emulator caught (see README.md).
  set_tests_properties(${_t} PROPERTIES LABELS unit TIMEOUT ${E_TIMEOUT}
    FAIL_REGULAR_EXPRESSION "no CUDA device;EMU VIOLATION")
endfunction()

foreach(part elementwise matmul attention flash_attention)
  pdserve_add_emu_test(TEST kernels_${part}_test
    LIBS pdserve_model pdserve_kv pdserve_kernels)
endforeach()
# The frequency test draws 20,000 rows (~40 min emulated).
pdserve_add_emu_test(TEST kernels_sampling_test
  FILTER -CudaSamplingTest.FrequenciesFollowTheKeptDistribution
  LIBS pdserve_model pdserve_kv pdserve_kernels)
pdserve_add_emu_test(TEST model_cuda_tiny_test
  LIBS pdserve_model pdserve_loader pdserve_kv pdserve_kernels)
pdserve_add_emu_test(TEST read_probe_test
  LIBS pdserve_model pdserve_loader pdserve_kv pdserve_kernels pdserve_metrics)
# stories260K only: SmolLM2 Q4_1 takes ~16 min emulated.
pdserve_add_emu_test(TEST model_cuda_test FILTER -CudaModelTest.SmolLm2*
  LIBS pdserve_model pdserve_loader pdserve_kv pdserve_kernels)
