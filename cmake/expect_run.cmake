# cmake -DEXE=... -DARGS=a;b;c [-DEXPECT_CODE=N] [-DEXPECT_STDOUT=regex]
#       [-DSUMMARY=out/dir/summary.txt -DEXPECT_SUMMARY=regex] -P expect_run.cmake
# Runs EXE with ARGS and fails unless it exits with EXPECT_CODE (default 0), its stdout alone
# matches EXPECT_STDOUT, and the file SUMMARY (written by the run) matches EXPECT_SUMMARY.
# For runs that succeed: cmake/expect_exit.cmake is the one for refusals (it wants stderr).
if(NOT DEFINED EXPECT_CODE)
  set(EXPECT_CODE 0)
endif()
if(DEFINED SUMMARY)
  file(REMOVE "${SUMMARY}")
endif()
execute_process(COMMAND ${EXE} ${ARGS} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code EQUAL EXPECT_CODE)
  message(FATAL_ERROR "'${EXE} ${ARGS}' exited ${code}, expected ${EXPECT_CODE}\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(DEFINED EXPECT_STDOUT AND NOT out MATCHES "${EXPECT_STDOUT}")
  message(FATAL_ERROR "stdout does not match '${EXPECT_STDOUT}':\n${out}")
endif()
if(DEFINED SUMMARY)
  if(NOT EXISTS "${SUMMARY}")
    message(FATAL_ERROR "the run wrote no ${SUMMARY}\nstdout:\n${out}\nstderr:\n${err}")
  endif()
  file(READ "${SUMMARY}" summary)
  if(NOT summary MATCHES "${EXPECT_SUMMARY}")
    message(FATAL_ERROR "${SUMMARY} does not match '${EXPECT_SUMMARY}':\n${summary}")
  endif()
endif()
message(STATUS "exit ${code} as expected; stdout:\n${out}")
