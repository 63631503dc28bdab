# common/metrics: pure stats / buckets / names, and the HTTP exporter end to
# end (binds loopback port 0; runs `promtool check metrics` when installed).
pdserve_add_test(NAME metrics_stats_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/metrics_stats_test.cc
  LIBS pdserve_metrics)
pdserve_add_test(NAME metrics_flags_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/metrics_flags_test.cc
  LIBS pdserve_metrics pdserve_config)
pdserve_add_test(NAME metrics_server_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/metrics_server_test.cc
  LIBS pdserve_metrics)
# The cuBLAS/civetweb TLS pitfall, with a 120 KiB-TLS fixture library
# linked in (may fail, must say why) and dlopen()ed (must work).
add_library(metrics_bigtls_fixture SHARED
  ${CMAKE_CURRENT_LIST_DIR}/metrics_bigtls_fixture.cc)
pdserve_add_test(NAME metrics_tls_linked_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/metrics_tls_test.cc
  LIBS pdserve_metrics metrics_bigtls_fixture)
target_compile_definitions(metrics_tls_linked_test PRIVATE
  METRICS_TLS_LINKED=1)
pdserve_add_test(NAME metrics_tls_dlopen_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/metrics_tls_test.cc
  LIBS pdserve_metrics ${CMAKE_DL_LIBS})
add_dependencies(metrics_tls_dlopen_test metrics_bigtls_fixture)
target_compile_definitions(metrics_tls_dlopen_test PRIVATE
  METRICS_BIGTLS_FIXTURE="$<TARGET_FILE:metrics_bigtls_fixture>")

# Real Prometheus scraping `pdserve serve` under a bounded load; skipped
# (exit 77, with the reason) until `pdserve serve` exists or when Prometheus
# or the default model is absent.
add_test(NAME prometheus_scrape_test
  COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/../integration/prometheus_scrape_test.py
          --pdserve $<TARGET_FILE:pdserve>)
set_tests_properties(prometheus_scrape_test PROPERTIES
  LABELS integration RESOURCE_LOCK pdserve_processes SKIP_RETURN_CODE 77 TIMEOUT 600)
