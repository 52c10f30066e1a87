# Fuzz targets: every tests/fuzz/fuzz_<name>.cpp defines
#   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
# and becomes an executable fuzz_<name> (in build/bin) linking the kiln library.
# fuzz_args_file also compiles tools/args_file.cpp and tools/cmd_train.cpp
# (the kiln tool's sources, not in the library) and needs CLI11.
# Its seed corpus is tests/fuzz/corpus/<name>/ and ctest replays it as
# "fuzz_replay_<name>".
#
#   default (any compiler): fuzz_<name> is the target plus tests/fuzz/replay_main.cpp,
#     which runs every file of the directories given; plain and KILN_SANITIZE
#     builds replay the seed corpora this way, without clang.
#   KILN_FUZZ=ON (clang only): fuzz_<name> links libFuzzer (-fsanitize=fuzzer),
#     the kiln library is instrumented with -fsanitize=fuzzer-no-link,address,undefined,
#     and the replay test runs the libFuzzer binary with -runs=0.
#     tools/fuzz.sh NAME SECONDS configures such a build (build-fuzz/) and runs it.
option(KILN_FUZZ "Build fuzz targets with libFuzzer + ASan/UBSan (clang)" OFF)

set(KILN_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
file(GLOB KILN_FUZZ_SOURCES CONFIGURE_DEPENDS ${KILN_FUZZ_DIR}/fuzz_*.cpp)

if(KILN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "KILN_FUZZ=ON needs clang (libFuzzer), e.g. -DCMAKE_CXX_COMPILER=clang++-14")
  endif()
  set(KILN_FUZZ_SANITIZERS -fsanitize=address,undefined -fno-sanitize-recover=undefined
                           -fno-omit-frame-pointer -g)
  target_compile_options(kiln PRIVATE -fsanitize=fuzzer-no-link ${KILN_FUZZ_SANITIZERS})
  target_link_options(kiln PRIVATE -fsanitize=address,undefined)
endif()

find_package(CLI11 QUIET)

foreach(src ${KILN_FUZZ_SOURCES})
  get_filename_component(target ${src} NAME_WE)       # fuzz_<name>
  string(REGEX REPLACE "^fuzz_" "" name ${target})     # <name>
  if(name STREQUAL "args_file" AND NOT TARGET CLI11::CLI11)
    message(STATUS "fuzz_args_file: CLI11 not found, target skipped")
    continue()
  endif()
  if(KILN_FUZZ)
    add_executable(${target} ${src})
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer ${KILN_FUZZ_SANITIZERS})
    target_link_options(${target} PRIVATE -fsanitize=fuzzer,address,undefined)
    set(replay_args -runs=0)
  else()
    add_executable(${target} ${src} ${KILN_FUZZ_DIR}/replay_main.cpp)
    set(replay_args)
  endif()
  set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
  target_compile_options(${target} PRIVATE ${KILN_WARNINGS} ${KILN_DRIVER_OPTIONS})
  target_link_libraries(${target} PRIVATE kiln kiln_deps_private)
  if(name STREQUAL "args_file")
    target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tools/args_file.cpp ${PROJECT_SOURCE_DIR}/tools/cmd_train.cpp)
    target_link_libraries(${target} PRIVATE CLI11::CLI11)
  endif()
  add_test(NAME fuzz_replay_${name} COMMAND ${target} ${replay_args} ${KILN_FUZZ_DIR}/corpus/${name})
  set_tests_properties(fuzz_replay_${name} PROPERTIES TIMEOUT 300)
endforeach()
