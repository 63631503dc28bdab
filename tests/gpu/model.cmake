# Whole-model tests of the CUDA runner (kernels/cuda/plugin) against the CPU
# forward pass. Label gpu: every test needing a device skips without one;
# the plugin-file checks run everywhere.
pdserve_add_test(NAME model_cuda_test LABEL gpu
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_cuda_test.cc
  LIBS pdserve_cuda_runner pdserve_model pdserve_loader pdserve_kv)
pdserve_add_test(NAME model_cuda_tiny_test LABEL gpu
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_cuda_tiny_test.cc
  LIBS pdserve_cuda_runner pdserve_model pdserve_loader pdserve_kv)
pdserve_add_test(NAME model_plugin_test LABEL gpu
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_plugin_test.cc
  LIBS pdserve_cuda_runner pdserve_model pdserve_loader pdserve_kv
       ${CMAKE_DL_LIBS})
pdserve_add_test(NAME model_pack_test LABEL gpu
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_pack_test.cc
  LIBS pdserve_cuda_runner)
pdserve_add_test(NAME model_engine_test LABEL gpu
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_engine_test.cc
  LIBS pdserve_cuda_runner pdserve_engine_core pdserve_model pdserve_loader)
add_dependencies(model_engine_test pdserve_cuda)
add_dependencies(model_plugin_test pdserve_cuda)
pdserve_add_test(NAME read_probe_test LABEL gpu
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/read_probe_test.cc
  LIBS pdserve_cuda_runner pdserve_model pdserve_loader pdserve_kv
       pdserve_metrics)
