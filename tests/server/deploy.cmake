# deploy/: manifests, alert rules, dashboard and container files, checked
# offline by tests/deploy/check_deploy.py (one CTest per check, label unit;
# exit 77 = skipped because a tool is missing, the output says which).
set(_pdserve_deploy_checks
  yamllint rules promql_names promql_syntax dashboard docs kustomize schema
  dockerfiles selftest)
foreach(check ${_pdserve_deploy_checks})
  add_test(NAME deploy_${check}
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/../deploy/run_check.sh ${check})
  set_tests_properties(deploy_${check} PROPERTIES
    LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 120)
endforeach()
