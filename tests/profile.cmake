# The profiler from the outside (tests/profile_cli.sh): --profile-steps,
# --profile-dir, --memory-summary, kiln bench train --profile.
if(TARGET kiln_cli)
  if(DEFINED ENV{KILN_PYTHON})
    set(_kiln_profile_python $ENV{KILN_PYTHON})
  else()
    set(_kiln_profile_python ${KILN_DEFAULT_PYTHON})
  endif()
  add_test(NAME profile_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/profile_cli.sh $<TARGET_FILE:kiln_cli>
                                    ${_kiln_profile_python} ${CMAKE_CURRENT_BINARY_DIR}/profile_cli)
  set_tests_properties(profile_cli PROPERTIES TIMEOUT 600)
endif()
