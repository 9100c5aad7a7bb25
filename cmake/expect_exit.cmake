# cmake -DEXE=... -DARGS=a;b;c -DEXPECT_CODE=N [-DEXPECT_STDERR=regex] [-DEXPECT_OUTPUT=regex] -P expect_exit.cmake
# Runs EXE with ARGS and fails unless it exits with EXPECT_CODE (and stderr, or stdout +
# stderr for EXPECT_OUTPUT, matches).
execute_process(COMMAND ${EXE} ${ARGS} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code EQUAL EXPECT_CODE)
  message(FATAL_ERROR "'${EXE} ${ARGS}' exited ${code}, expected ${EXPECT_CODE}\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(DEFINED EXPECT_STDERR AND NOT err MATCHES "${EXPECT_STDERR}")
  message(FATAL_ERROR "stderr does not match '${EXPECT_STDERR}':\n${err}")
endif()
if(DEFINED EXPECT_OUTPUT AND NOT "${out}${err}" MATCHES "${EXPECT_OUTPUT}")
  message(FATAL_ERROR "output does not match '${EXPECT_OUTPUT}':\n${out}${err}")
endif()
if(err STREQUAL "")
  message(FATAL_ERROR "'${EXE} ${ARGS}' exited ${code} without explaining why on stderr")
endif()
message(STATUS "exit ${code} as expected; stderr: ${err}")
