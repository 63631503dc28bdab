pdserve_add_test(NAME policy_test LABEL unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/policy_test.cc
  LIBS pdserve_scheduler_policy)
pdserve_add_test(NAME simulator_test LABEL unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/simulator_test.cc
  LIBS pdserve_scheduler_simulator)
pdserve_add_test(NAME frontend_request_test LABEL unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/frontend_request_test.cc
  LIBS pdserve_frontend)
pdserve_add_test(NAME live_request_ids_test LABEL unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/live_request_ids_test.cc
  LIBS pdserve_scheduler)
