# The profiler from the outside (tests/profile_cli.sh): --profile-steps,
# --profile-dir, --memory-summary, kiln bench train --profile.
if(TARGET kiln_cli)
  add_test(NAME profile_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/profile_cli.sh $<TARGET_FILE:kiln_cli>
                                    ${CMAKE_CURRENT_BINARY_DIR}/profile_cli)
  set_tests_properties(profile_cli PROPERTIES TIMEOUT 600)
endif()
