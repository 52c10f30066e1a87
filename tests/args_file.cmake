# tools/args_file.cpp (the --args-file reader, part of kiln_cli) is also
# compiled into kiln_tests, so tests/test_hostile_input.cpp (ArgsFile.*) can
# feed it hostile files. Skipped where CLI11 is missing (no tools built).
find_package(CLI11 QUIET)
if(TARGET CLI11::CLI11)
  target_sources(kiln_tests PRIVATE ${PROJECT_SOURCE_DIR}/tools/args_file.cpp)
  target_link_libraries(kiln_tests PRIVATE CLI11::CLI11)
  target_compile_definitions(kiln_tests PRIVATE KILN_TEST_ARGS_FILE=1)
endif()
