pdserve_add_test(NAME policy_test LABEL unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/policy_test.cc
  LIBS pdserve_scheduler_policy)
pdserve_add_test(NAME simulator_test LABEL unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/simulator_test.cc
  LIBS pdserve_scheduler_simulator)
pdserve_add_test(NAME frontend_request_test LABEL unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/frontend_request_test.cc
  LIBS pdserve_frontend)
pdserve_add_test(NAME cell_router_test LABEL unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/cell_router_test.cc
  LIBS pdserve_frontend)
pdserve_add_test(NAME delayed_runner_test LABEL unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/delayed_runner_test.cc
  LIBS pdserve_delayed_runner)
pdserve_add_test(NAME live_request_ids_test LABEL unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/live_request_ids_test.cc
  LIBS pdserve_scheduler)
pdserve_add_test(NAME simulate_cli_test LABEL unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/simulate_cli_test.cc
          ${CMAKE_SOURCE_DIR}/server/cli/simulate_command.cc
  LIBS pdserve_cluster_simulator pdserve_config nlohmann_json::nlohmann_json)
pdserve_add_test(NAME cluster_simulator_test LABEL unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/cluster_simulator_test.cc
  LIBS pdserve_cluster_simulator)
pdserve_add_test(NAME status_watch_test LABEL unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/status_watch_test.cc
  LIBS pdserve_scheduler pdserve_frontend)
