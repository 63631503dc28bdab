# common/metrics: cost of recording (per engine step, per streamed token, per
# request) and of serving a scrape, and the host copy-bandwidth probe.
add_executable(metrics_bench ${CMAKE_CURRENT_LIST_DIR}/metrics_bench.cc)
target_link_libraries(metrics_bench PRIVATE pdserve_metrics
  benchmark::benchmark benchmark::benchmark_main)
