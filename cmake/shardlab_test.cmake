# shardlab_add_test(NAME <name> TARGET <exe> LABEL <unit|property|mpi|scenario|bench|...>
#                   [TIMEOUT <s>] [MPI_RANKS <n>] [ARGS ...] [ENVIRONMENT k=v ...]
#                   [WORKING_DIRECTORY <dir>])
# shardlab_add_test(NAME <name> COMMAND <program> <args>... LABEL ... [TIMEOUT ...] ...)
# The one way tests get registered: every test has a label and a timeout (120 s unless
# given), scaled by SHARDLAB_TEST_TIMEOUT_SCALE. COMMAND runs any program (cmake -P
# scripts, Python, shardlab by its target name) instead of a target's executable. With
# MPI_RANKS the test is launched as
#   mpiexec -n N <SHARDLAB_MPIEXEC_PREFLAGS> <exe> <args>
# where the pre-flags (root/oversubscribe) come from the preset or cache, never from here.
# Sanitizer builds run 5-20x slower: the asan preset sets SHARDLAB_TEST_TIMEOUT_SCALE so the
# same tests keep their meaning there instead of timing out.
set(SHARDLAB_TEST_TIMEOUT_SCALE 1 CACHE STRING "multiplies every test's timeout")
function(shardlab_scaled_timeout out seconds)
  math(EXPR scaled "${seconds} * ${SHARDLAB_TEST_TIMEOUT_SCALE}")
  set(${out} ${scaled} PARENT_SCOPE)
endfunction()

# Sets `var` (a TIMEOUT argument, maybe empty) to `default` when empty, then scales it.
macro(shardlab_test_timeout var default)
  if(NOT ${var})
    set(${var} ${default})
  endif()
  shardlab_scaled_timeout(${var} ${${var}})
endmacro()

function(shardlab_add_test)
  # PARSE_ARGV keeps an argument that holds a ';' (a cmake -P script's "-DARGS=run;--set;...")
  # one argument of COMMAND.
  cmake_parse_arguments(PARSE_ARGV 0 T "" "NAME;TARGET;LABEL;TIMEOUT;MPI_RANKS;WORKING_DIRECTORY"
                        "ARGS;ENVIRONMENT;COMMAND")
  if(NOT T_NAME OR NOT T_LABEL OR (NOT T_TARGET AND NOT T_COMMAND) OR (T_TARGET AND T_COMMAND))
    message(FATAL_ERROR "shardlab_add_test needs NAME, LABEL and one of TARGET or COMMAND")
  endif()
  if(T_COMMAND AND (T_MPI_RANKS OR T_ARGS))
    message(FATAL_ERROR "shardlab_add_test: MPI_RANKS and ARGS go with TARGET; COMMAND holds its own arguments")
  endif()
  shardlab_test_timeout(T_TIMEOUT 120)
  if(T_COMMAND)
    add_test(NAME ${T_NAME} COMMAND ${T_COMMAND})
  elseif(T_MPI_RANKS)
    add_test(NAME ${T_NAME}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${T_MPI_RANKS}
                     ${MPIEXEC_PREFLAGS} ${SHARDLAB_MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:${T_TARGET}> ${T_ARGS})
    set_tests_properties(${T_NAME} PROPERTIES PROCESSORS ${T_MPI_RANKS})
  else()
    add_test(NAME ${T_NAME} COMMAND $<TARGET_FILE:${T_TARGET}> ${T_ARGS})
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABEL}" TIMEOUT ${T_TIMEOUT})
  if(T_WORKING_DIRECTORY)
    set_tests_properties(${T_NAME} PROPERTIES WORKING_DIRECTORY "${T_WORKING_DIRECTORY}")
  endif()
  if(T_ENVIRONMENT)
    set_tests_properties(${T_NAME} PROPERTIES ENVIRONMENT "${T_ENVIRONMENT}")
  endif()
endfunction()

# shardlab_add_gtest(<name> SOURCES ... LIBS ... [LABEL unit] [TIMEOUT s] [OWN_MAIN])
# Builds a gtest executable and registers it as one ctest entry (OWN_MAIN: the sources
# provide main(); otherwise gtest_main does).
function(shardlab_add_gtest name)
  cmake_parse_arguments(G "OWN_MAIN" "LABEL;TIMEOUT" "SOURCES;LIBS;ARGS;ENVIRONMENT" ${ARGN})
  if(NOT G_LABEL)
    set(G_LABEL unit)
  endif()
  add_executable(${name} ${G_SOURCES})
  target_link_libraries(${name} PRIVATE ${G_LIBS} shardlab_testing GTest::gtest shardlab_options)
  if(NOT G_OWN_MAIN)
    target_link_libraries(${name} PRIVATE GTest::gtest_main)
  endif()
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  shardlab_add_test(NAME ${name} TARGET ${name} LABEL ${G_LABEL} TIMEOUT ${G_TIMEOUT}
                    ARGS ${G_ARGS} ENVIRONMENT ${G_ENVIRONMENT})
endfunction()

# shardlab_hpu_skip_without_gaudi(<test>): a test against real Gaudi hardware (label hpu)
# prints "skipped: no Gaudi device" (GTEST_SKIP) when there is no card; ctest then reports
# it as skipped, never as passed. Tests that use the cards never run concurrently.
function(shardlab_hpu_skip_without_gaudi test)
  set_tests_properties(${test} PROPERTIES SKIP_REGULAR_EXPRESSION "skipped: no Gaudi device"
                                          RESOURCE_LOCK gaudi_cards)
endfunction()

# shardlab_add_exit_test(NAME <name> LABEL <label> CODE <exit code> ARGS ... [STDERR <regex>]
#                        [OUTPUT <regex>] [TIMEOUT <s>])
# Runs shardlab with ARGS and passes when it exits with CODE, explains itself on stderr,
# and (when given) stderr / stdout + stderr match the regex (cmake/expect_exit.cmake).
# The arguments travel as a CMake list: a regex must not hold an unbalanced '[' (CMake
# would join the arguments after it into one); match a literal '[' with '.'.
function(shardlab_add_exit_test)
  cmake_parse_arguments(T "" "NAME;LABEL;CODE;STDERR;OUTPUT;TIMEOUT" "ARGS" ${ARGN})
  if(NOT T_NAME OR NOT T_LABEL OR T_CODE STREQUAL "")
    message(FATAL_ERROR "shardlab_add_exit_test needs NAME, LABEL and CODE")
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 60)
  endif()
  set(expect "-DEXPECT_CODE=${T_CODE}")
  if(DEFINED T_STDERR)
    list(APPEND expect "-DEXPECT_STDERR=${T_STDERR}")
  endif()
  if(DEFINED T_OUTPUT)
    list(APPEND expect "-DEXPECT_OUTPUT=${T_OUTPUT}")
  endif()
  list(JOIN T_ARGS ";" args)
  shardlab_add_test(NAME ${T_NAME} LABEL ${T_LABEL} TIMEOUT ${T_TIMEOUT}
                    COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:shardlab> "-DARGS=${args}" ${expect}
                            -P ${PROJECT_SOURCE_DIR}/cmake/expect_exit.cmake)
endfunction()

# shardlab_add_scenario_test(NAME <name> SCENARIO <file.yaml> OUT <dir> EXPECTED <summary.txt>
#                            [SET <key=value>...] [TIMEOUT <s>])
# A golden scenario (label scenario, 300 s unless given): `shardlab run SCENARIO [--set
# key=value]... --out OUT`, whose summary.txt must equal EXPECTED (cmake/scenario_golden.cmake;
# SHARDLAB_UPDATE_EXPECTED=1 rewrites it — review the diff).
function(shardlab_add_scenario_test)
  cmake_parse_arguments(S "" "NAME;SCENARIO;OUT;EXPECTED;TIMEOUT" "SET" ${ARGN})
  if(NOT S_NAME OR NOT S_SCENARIO OR NOT S_OUT OR NOT S_EXPECTED)
    message(FATAL_ERROR "shardlab_add_scenario_test needs NAME, SCENARIO, OUT and EXPECTED")
  endif()
  if(NOT S_TIMEOUT)
    set(S_TIMEOUT 300)
  endif()
  set(extra "")
  foreach(assignment IN LISTS S_SET)
    list(APPEND extra --set ${assignment})
  endforeach()
  set(run ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:shardlab> -DSCENARIO=${S_SCENARIO} -DOUT=${S_OUT}
      -DEXPECTED=${S_EXPECTED})
  set(script -P ${PROJECT_SOURCE_DIR}/cmake/scenario_golden.cmake)
  if(extra)  # "-DEXTRA_ARGS=..." stays one argument (a list the script splits)
    shardlab_add_test(NAME ${S_NAME} LABEL scenario TIMEOUT ${S_TIMEOUT} COMMAND ${run} "-DEXTRA_ARGS=${extra}" ${script})
  else()
    shardlab_add_test(NAME ${S_NAME} LABEL scenario TIMEOUT ${S_TIMEOUT} COMMAND ${run} ${script})
  endif()
endfunction()
