# pdserve_scheduler_policy: the pure scheduling policy (no IO, no clock, no
# env, no JSON; tests/layering holds it so).
add_library(pdserve_scheduler_policy STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/policy.cc)
target_link_libraries(pdserve_scheduler_policy PUBLIC pdserve_kv_ledger
  absl::status absl::strings absl::str_format absl::span absl::flat_hash_map
  absl::flat_hash_set)
# pdserve_scheduler_simulator: the trace simulator over the policy (parses
# trace and calibration text handed to it; no file IO) and the step-cost
# model the shell fits online.
add_library(pdserve_scheduler_simulator STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/simulator.cc)
target_link_libraries(pdserve_scheduler_simulator PUBLIC
  pdserve_scheduler_policy absl::statusor absl::strings absl::str_format
  PRIVATE nlohmann_json::nlohmann_json)
