# server/metrics: pure stats / buckets / names, and the HTTP exporter end to
# end (binds loopback port 0; runs `promtool check metrics` when installed).
if(TARGET pdserve_metrics)
  pdserve_add_test(NAME metrics_stats_test LABEL unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/metrics_stats_test.cc
    LIBS pdserve_metrics)
  pdserve_add_test(NAME metrics_server_test LABEL unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/metrics_server_test.cc
    LIBS pdserve_metrics)
endif()
