# pdserve_scheduler_policy: the pure policy and the trace simulator built on
# it (no IO, no clock; the simulator parses trace text handed to it).
add_library(pdserve_scheduler_policy STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/policy.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/simulator.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/cli_args.cc)
target_link_libraries(pdserve_scheduler_policy PUBLIC
  absl::status absl::statusor absl::strings absl::str_format absl::span
  absl::flat_hash_map absl::flat_hash_set nlohmann_json::nlohmann_json)
