# Helpers that register hpctrain's tests with CTest, each with a timeout so a hang fails the test
# instead of blocking CI.

# mpiexec flags: OpenMPI refuses root without --allow-run-as-root and more ranks than cores
# without --oversubscribe; CI containers run as root on 2 cores.
set(HPCTRAIN_MPIEXEC ${MPIEXEC_EXECUTABLE})
set(HPCTRAIN_MPIEXEC_FLAGS ${MPIEXEC_PREFLAGS})
execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _mpiexec_version ERROR_QUIET)
if(_mpiexec_version MATCHES "Open MPI|OpenRTE")
  list(APPEND HPCTRAIN_MPIEXEC_FLAGS --oversubscribe --bind-to none)
  execute_process(COMMAND id -u OUTPUT_VARIABLE _uid OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_uid STREQUAL "0")
    list(APPEND HPCTRAIN_MPIEXEC_FLAGS --allow-run-as-root)
  endif()
endif()
string(REPLACE ";" " " HPCTRAIN_MPIEXEC_FLAGS_STRING "${HPCTRAIN_MPIEXEC_FLAGS}")

# One thread per rank in tests: ranks outnumber cores, and results must not depend on threads.
# Tests run side by side (scripts/test.sh: ctest -j twice the cores; a test's PROCESSORS is its
# ranks), so a rank waiting in MPI yields its core instead of spinning on it.
set(HPCTRAIN_TEST_ENV
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 HPCTRAIN_THREADS=1 HPCTRAIN_COLLECTIVE_TIMEOUT=90
    OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1)

# Longest first from the first run: ctest starts tests in descending COST, and without its own
# cost data (a fresh build has none) COST is the property. tests/test_costs.txt holds each test's
# wall seconds from a recent run of the suite (`scripts/test_times.py BUILD --costs` writes it);
# a test that is not listed costs 0 and starts after the listed ones.
file(STRINGS ${PROJECT_SOURCE_DIR}/tests/test_costs.txt _cost_lines REGEX "^[^#]")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/test_costs.txt)
foreach(_line ${_cost_lines})
  if(_line MATCHES "^([^ ]+) +([0-9.]+)$")
    set(HPCTRAIN_COST_${CMAKE_MATCH_1} ${CMAKE_MATCH_2})
  endif()
endforeach()
function(hpctrain_test_cost name)
  if(DEFINED HPCTRAIN_COST_${name})
    set_tests_properties(${name} PROPERTIES COST ${HPCTRAIN_COST_${name}})
  endif()
endfunction()

# hpctrain_test_unity(NAME SOURCES...): a LibTorch test of several sources compiles them as one unit
# (each would pay the PCH's ~15 s on its own; cmake/HpctrainTargets.cmake).
function(hpctrain_test_unity name)
  list(LENGTH ARGN count)
  if(count GREATER 1)
    hpctrain_unity(${name})
  endif()
endfunction()

# hpctrain_unit_test(NAME SOURCES ... LIBS ... [TIMEOUT s] [NO_TORCH]): GoogleTest without MPI.
# NO_TORCH: the test links only its LIBS (no LibTorch, no precompiled header): for pure targets.
function(hpctrain_unit_test name)
  cmake_parse_arguments(ARG "NO_TORCH" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE hpctrain_options GTest::gtest_main ${ARG_LIBS})
  if(NOT ARG_NO_TORCH)
    hpctrain_use_pch(${name})
    hpctrain_test_unity(${name} ${ARG_SOURCES})
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "unit;${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
                       ENVIRONMENT "${HPCTRAIN_TEST_ENV}")
  hpctrain_test_cost(${name})
endfunction()

# hpctrain_mpi_test(NAME SOURCES ... LIBS ... [RANKS 1 2 4] [TIMEOUT s]): GoogleTest with the
# MPI-aware main, registered once per rank count as NAME.npN.
function(hpctrain_mpi_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBS;RANKS;LABELS" ${ARGN})
  if(NOT ARG_RANKS)
    set(ARG_RANKS 1 2 4)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE hpctrain_options hpctrain_mpi_gtest_main ${ARG_LIBS})
  hpctrain_use_pch(${name})
  hpctrain_test_unity(${name} ${ARG_SOURCES})
  foreach(n ${ARG_RANKS})
    add_test(NAME ${name}.np${n}
             COMMAND ${HPCTRAIN_MPIEXEC} ${HPCTRAIN_MPIEXEC_FLAGS} ${MPIEXEC_NUMPROC_FLAG} ${n}
                     $<TARGET_FILE:${name}>)
    set_tests_properties(${name}.np${n} PROPERTIES LABELS "mpi;${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
                         PROCESSORS ${n} ENVIRONMENT "${HPCTRAIN_TEST_ENV}")
    hpctrain_test_cost(${name}.np${n})
  endforeach()
endfunction()

# hpctrain_script_test(NAME SCRIPT file [ARGS ...] [LABELS ...] [TIMEOUT s] [PROCESSORS n]
# [SERIAL] [FIXTURES_SETUP f] [FIXTURES_CLEANUP f] [FIXTURES_REQUIRED f...]): a bash script
# driving the real binary. Every script test but a fixture's own requires the fixture `python`.
# PROCESSORS: the most ranks it runs at once (default 2). SERIAL: it waits on timeouts or clocks
# (hang detection, signals, stragglers, a time budget) that a busy core would skew: it gets the
# label `timing`, and scripts/test.sh runs those tests after all others, two at a time (their
# processes mostly wait, so two of them leave each other the cores). Every slurm-labelled test is
# a timing test too (beside the other tests at -j 8, the preemption test's 12,000-step reference,
# ranks in lock step, ran past its 400 s limit: docs/BENCHMARKS.md, "The test suite"); a
# plain `ctest` runs them beside the rest (`ctest -LE timing`, then `ctest -L timing -j 4`, is
# what scripts/test.sh does). It gets HPCTRAIN_BIN,
# HPCTRAIN_MPIEXEC (with flags), HPCTRAIN_SOURCE_DIR, HPCTRAIN_BUILD_DIR, HPCTRAIN_TEST_DATA (data
# shared between tests, made by fixtures such as "fmnist") and a private HPCTRAIN_TEST_TMP.
function(hpctrain_script_test name)
  cmake_parse_arguments(ARG "SERIAL" "SCRIPT;TIMEOUT;PROCESSORS;FIXTURES_SETUP;FIXTURES_CLEANUP"
                        "ARGS;LABELS;DEPENDS;FIXTURES_REQUIRED" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  if(NOT ARG_LABELS)
    set(ARG_LABELS e2e)
  endif()
  if(NOT ARG_PROCESSORS)
    set(ARG_PROCESSORS 2)
  endif()
  if(ARG_SERIAL OR "slurm" IN_LIST ARG_LABELS)
    list(APPEND ARG_LABELS timing)
  endif()
  set(tmp ${PROJECT_BINARY_DIR}/test-tmp/${name})
  add_test(NAME ${name} COMMAND bash ${ARG_SCRIPT} ${ARG_ARGS})
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
    PROCESSORS ${ARG_PROCESSORS}
    ENVIRONMENT "${HPCTRAIN_TEST_ENV};HPCTRAIN_BIN=$<TARGET_FILE:hpctrain>;HPCTRAIN_FORK_CLIENT=$<TARGET_FILE:fork_client>;HPCTRAIN_MPIEXEC=${HPCTRAIN_MPIEXEC} ${HPCTRAIN_MPIEXEC_FLAGS_STRING};HPCTRAIN_SOURCE_DIR=${PROJECT_SOURCE_DIR};HPCTRAIN_BUILD_DIR=${PROJECT_BINARY_DIR};HPCTRAIN_TEST_DATA=${PROJECT_BINARY_DIR}/test-data;HPCTRAIN_TEST_TMP=${tmp}")
  hpctrain_test_cost(${name})
  if(ARG_FIXTURES_SETUP)
    set_tests_properties(${name} PROPERTIES FIXTURES_SETUP "${ARG_FIXTURES_SETUP}")
  endif()
  if(ARG_FIXTURES_CLEANUP)
    set_tests_properties(${name} PROPERTIES FIXTURES_CLEANUP "${ARG_FIXTURES_CLEANUP}")
  endif()
  # Every other script test runs while the suite's Python fork server serves (fixture `python`,
  # tests/e2e/runtime/fixture_python.sh): its $PY then skips importing numpy, h5py and torch.
  if(NOT ARG_FIXTURES_SETUP AND NOT ARG_FIXTURES_CLEANUP)
    list(APPEND ARG_FIXTURES_REQUIRED python)
  endif()
  if(ARG_FIXTURES_REQUIRED)
    set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED "${ARG_FIXTURES_REQUIRED}")
  endif()
  if(ARG_DEPENDS)
    set_tests_properties(${name} PROPERTIES DEPENDS "${ARG_DEPENDS}")
  endif()
endfunction()
