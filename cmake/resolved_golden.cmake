# Compares `shardlab validate SCENARIO --print` (the scenario with every default filled in)
# with a stored expected file, so a change to what the scenario asks for shows in review.
#   cmake -DEXE=shardlab -DSCENARIO=file.yaml -DEXPECTED=expected.resolved.yaml -P resolved_golden.cmake
# SHARDLAB_UPDATE_EXPECTED=1 rewrites the expected file from this run instead.
execute_process(COMMAND "${EXE}" validate "${SCENARIO}" --print
                RESULT_VARIABLE code OUTPUT_VARIABLE actual ERROR_VARIABLE err)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "shardlab validate ${SCENARIO} --print exited ${code}: ${err}")
endif()
if("$ENV{SHARDLAB_UPDATE_EXPECTED}" STREQUAL "1")
  file(WRITE "${EXPECTED}" "${actual}")
  message("updated ${EXPECTED}")
  return()
endif()
if(NOT EXISTS "${EXPECTED}")
  message(FATAL_ERROR "no expected file ${EXPECTED}; run with SHARDLAB_UPDATE_EXPECTED=1 to create it")
endif()
file(READ "${EXPECTED}" expected)
if(NOT actual STREQUAL expected)
  message(FATAL_ERROR "the resolved ${SCENARIO} differs from ${EXPECTED}\n--- expected\n${expected}\n--- actual\n"
                      "${actual}\n(SHARDLAB_UPDATE_EXPECTED=1 ctest -R <test> rewrites it after review)")
endif()
