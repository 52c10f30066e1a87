# Data-parallel tests (dist/): the kiln_dist_tests GoogleTest binary
# (tests/dist/*.cpp, its own main) run
#   dist_single         as one process (world size 1, the "single" group);
#   dist_mpi_np2        under `mpirun -np 2` (collectives, DDP equivalence,
#                       bucket sizes, no_sync);
#   dist_dead_rank_*    under `mpirun -np 2` with KILN_DIST_TIMEOUT=10, through
#                       this file in script mode (cmake -P): one rank stops
#                       participating (sleeps, or exits), and the run passes when
#                       mpirun exits non-zero, soon enough, with the expected
#                       message (the collective's name for the sleeping rank).
# As root mpirun needs --allow-run-as-root; --oversubscribe and --bind-to none
# because the ranks share a few cores with other jobs.
if(CMAKE_SCRIPT_MODE_FILE)
  # Arguments: -DMPIEXEC= (words joined by |) -DTEST_BIN= -DFILTER= -DEXPECT= (parts
  # joined by |) -DMAX_SECONDS= -DTIMEOUT= [-DEXPECT_RC=]
  string(REPLACE "|" ";" mpiexec "${MPIEXEC}")
  string(REPLACE "|" ";" expect "${EXPECT}")
  string(TIMESTAMP t0 "%s")
  execute_process(
    COMMAND ${mpiexec} -np 2 -x KILN_DIST_TIMEOUT=${TIMEOUT} "${TEST_BIN}"
            --gtest_also_run_disabled_tests --gtest_filter=${FILTER}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
  string(TIMESTAMP t1 "%s")
  math(EXPR elapsed "${t1} - ${t0}")
  message(STATUS "mpirun exited with '${rc}' after ${elapsed} s\n--- stdout\n${out}\n--- stderr\n${err}")
  if(rc STREQUAL "0")
    message(FATAL_ERROR "the run succeeded although a rank stopped participating")
  endif()
  if(NOT rc MATCHES "^[0-9]+$")
    message(FATAL_ERROR "mpirun did not exit by itself: ${rc}")
  endif()
  if(DEFINED EXPECT_RC AND NOT rc EQUAL EXPECT_RC)
    message(FATAL_ERROR "exit code ${rc}, expected ${EXPECT_RC}")
  endif()
  foreach(part ${expect})
    string(FIND "${out}${err}" "${part}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "the output lacks \"${part}\"")
    endif()
  endforeach()
  if(elapsed GREATER MAX_SECONDS)
    message(FATAL_ERROR "took ${elapsed} s, more than ${MAX_SECONDS} s")
  endif()
  message(STATUS "ok: non-zero exit (${rc}) after ${elapsed} s with \"${EXPECT}\"")
  return()
endif()

file(GLOB KILN_DIST_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/dist/*.cpp)
add_executable(kiln_dist_tests ${KILN_DIST_TEST_SOURCES})
target_compile_options(kiln_dist_tests PRIVATE ${KILN_WARNINGS} ${KILN_DRIVER_OPTIONS})
target_link_libraries(kiln_dist_tests PRIVATE kiln_all GTest::gtest)
target_compile_definitions(kiln_dist_tests PRIVATE  # what tests/test_util.h reads
  KILN_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
  KILN_DEFAULT_DATA="${KILN_DEFAULT_DATA}"
  KILN_DEFAULT_PYTHON="${KILN_DEFAULT_PYTHON}"
  KILN_BINARY_DIR="${PROJECT_BINARY_DIR}")

set(KILN_MPIRUN ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none
    --mca btl_vader_single_copy_mechanism none)
# OpenMPI keeps some allocations until exit; LeakSanitizer is told so.
set(KILN_DIST_ENV "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/dist/lsan.supp")
# Under mpirun, OpenMPI's plugins are unloaded before LeakSanitizer runs, so
# their allocations show as leaks in "<unknown module>" that no suppression
# can name. The sanitizer build therefore runs the mpirun tests with leak
# detection off (ASan's memory checks stay on); dist_single, which runs the
# same DDP code without mpirun, keeps leak detection.
set(KILN_MPI_ENV "${KILN_DIST_ENV}")
if(KILN_SANITIZE)
  set(KILN_MPI_ENV "${KILN_DIST_ENV};ASAN_OPTIONS=detect_leaks=0:abort_on_error=1")
endif()

add_test(NAME dist_single COMMAND kiln_dist_tests)
set_tests_properties(dist_single PROPERTIES TIMEOUT 600 ENVIRONMENT "${KILN_DIST_ENV}")
# Without MPI (KILN_MPI=OFF) only the one-process run is there.
if(NOT KILN_WITH_MPI)
  return()
endif()
add_test(NAME dist_mpi_np2 COMMAND ${KILN_MPIRUN} -np 2 -x KILN_DIST_TIMEOUT=120 $<TARGET_FILE:kiln_dist_tests>)
set_tests_properties(dist_mpi_np2 PROPERTIES TIMEOUT 600 ENVIRONMENT "${KILN_MPI_ENV}")
set_tests_properties(dist_mpi_np2 PROPERTIES PROCESSORS 2)

# The sleeping rank: rank 0 must report the timed-out all_reduce and end the
# job with exit code 3 (its own clock says the error came 9-15 s after the
# step began; 4 otherwise). The exiting rank: mpirun ends the job as soon as a
# rank exits without MPI_Finalize, well within the timeout. The elapsed bounds
# include mpirun's start-up and the steps before the failure on a busy machine.
string(REPLACE ";" "|" _mpirun "${KILN_MPIRUN}")
foreach(_case sleeping exiting)
  if(_case STREQUAL "sleeping")
    set(_filter DeadRank.DISABLED_SleepingRank)
    set(_expect "all_reduce(avg) of|timed out after 10 s|gradient bucket|rank 1 did not answer a liveness probe within 1 s")
    set(_rc -DEXPECT_RC=3)
    set(_max 40)
  else()
    set(_filter DeadRank.DISABLED_ExitingRank)
    set(_expect "rank 1 stops participating (exits)")
    set(_rc)
    set(_max 25)
  endif()
  add_test(NAME dist_dead_rank_${_case}
    COMMAND ${CMAKE_COMMAND} "-DMPIEXEC=${_mpirun}" -DTEST_BIN=$<TARGET_FILE:kiln_dist_tests>
            -DFILTER=${_filter} "-DEXPECT=${_expect}" -DMAX_SECONDS=${_max} -DTIMEOUT=10 ${_rc}
            -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(dist_dead_rank_${_case} PROPERTIES TIMEOUT 300 PROCESSORS 2 ENVIRONMENT "${KILN_MPI_ENV}")
endforeach()
