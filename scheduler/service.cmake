# pdserve_scheduler: the scheduler's IO shell (policy loop, engine client)
# and its gRPC service / process.
add_library(pdserve_scheduler STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/scheduler_shell.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/scheduler_shell_steps.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/scheduler_service.cc)
target_link_libraries(pdserve_scheduler PUBLIC
  pdserve_scheduler_policy pdserve_proto Threads::Threads
  # server/metrics is configured after this folder; linked by name.
  pdserve_metrics pdserve_metrics_flags)
