# kiln_alloc_tsan_tests: the caching allocator's tests (test_caching_allocator*.cpp)
# built alone with only core/memory/*.cpp, under ThreadSanitizer, registered
# with ctest as "kiln_alloc_tsan_tests".
#
#   KILN_TSAN=ON        everything is built with -fsanitize=thread (top-level
#                       option); this target comes along.
#   KILN_ALLOC_TSAN=ON  only this target is instrumented, in an otherwise
#                       normal build (cheap for CI):
#     cmake -S . -B build-tsan -G Ninja -DKILN_CUDA=OFF -DKILN_ALLOC_TSAN=ON
#     ninja -C build-tsan kiln_alloc_tsan_tests
#     ctest --test-dir build-tsan -R kiln_alloc_tsan_tests --output-on-failure
option(KILN_ALLOC_TSAN "Build kiln_alloc_tsan_tests (allocator tests under ThreadSanitizer)" OFF)

if(KILN_TSAN OR KILN_ALLOC_TSAN)
  if(KILN_SANITIZE)
    message(FATAL_ERROR "KILN_ALLOC_TSAN/KILN_TSAN cannot be combined with KILN_SANITIZE (ASan): use another build directory")
  endif()
  file(GLOB KILN_ALLOC_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/core/memory/*.cpp)
  add_executable(kiln_alloc_tsan_tests ${KILN_ALLOC_SOURCES}
    ${CMAKE_CURRENT_SOURCE_DIR}/test_caching_allocator.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/test_caching_allocator_failures.cpp)
  target_include_directories(kiln_alloc_tsan_tests PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(kiln_alloc_tsan_tests PRIVATE ${KILN_WARNINGS})
  target_link_libraries(kiln_alloc_tsan_tests PRIVATE GTest::gtest GTest::gtest_main Threads::Threads)
  if(NOT KILN_TSAN)
    target_compile_options(kiln_alloc_tsan_tests PRIVATE -fsanitize=thread -fno-omit-frame-pointer -g)
    target_link_options(kiln_alloc_tsan_tests PRIVATE -fsanitize=thread)
  endif()
  add_test(NAME kiln_alloc_tsan_tests COMMAND kiln_alloc_tsan_tests)
  set_tests_properties(kiln_alloc_tsan_tests PROPERTIES
    TIMEOUT 900
    ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1")
endif()
