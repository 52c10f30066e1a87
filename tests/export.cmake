# `kiln export` from the outside (tests/export_cli.sh); ONNX Runtime checks
# run with KILN_PYTHON's interpreter when it exists.
if(TARGET kiln_cli AND TARGET kiln_onnx)
  add_test(NAME export_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/export_cli.sh $<TARGET_FILE:kiln_cli>
                                   ${CMAKE_CURRENT_BINARY_DIR}/export_cli ${KILN_DEFAULT_PYTHON})
  set_tests_properties(export_cli PROPERTIES TIMEOUT 600)
endif()
