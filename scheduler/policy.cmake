# pdserve_scheduler_policy: the pure policy and the trace simulator built on
# it (no IO besides the simulator's trace parser input strings, no clock).
add_library(pdserve_scheduler_policy STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/policy.cc)
target_link_libraries(pdserve_scheduler_policy PUBLIC
  absl::status absl::statusor absl::strings absl::str_format absl::span
  absl::flat_hash_map absl::flat_hash_set)
