# pdserve_scheduler: the scheduler's IO shell (policy loop, engine client)
# and its gRPC service / process.
add_library(pdserve_scheduler STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/live_request_ids.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/scheduler_shell.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/scheduler_shell_steps.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/scheduler_shell_handoff.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/status_watch.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/scheduler_service.cc)
target_link_libraries(pdserve_scheduler PUBLIC
  pdserve_scheduler_policy pdserve_scheduler_simulator pdserve_proto
  pdserve_config pdserve_process pdserve_metrics Threads::Threads)
