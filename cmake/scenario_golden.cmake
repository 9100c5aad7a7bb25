# Runs one scenario and compares its summary.txt with the stored expected summary.
#   cmake -DEXE=shardlab -DSCENARIO=file.yaml -DOUT=dir -DEXPECTED=expected.summary.txt
#         [-DEXTRA_ARGS=a;b] -P scenario_golden.cmake
# With the environment variable SHARDLAB_UPDATE_EXPECTED=1 the expected file is rewritten
# from this run instead (review the diff before committing it).
file(REMOVE_RECURSE "${OUT}")
execute_process(COMMAND "${EXE}" run "${SCENARIO}" --out "${OUT}" ${EXTRA_ARGS}
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT code EQUAL 0)
  message(FATAL_ERROR "shardlab run ${SCENARIO} exited ${code}")
endif()
file(READ "${OUT}/summary.txt" actual)
# The provenance line (shardlab version, host) differs between builds and machines, not
# between runs: it is not part of the golden.
string(REGEX REPLACE "\nprovenance: [^\n]*" "" actual "${actual}")
if("$ENV{SHARDLAB_UPDATE_EXPECTED}" STREQUAL "1")
  file(WRITE "${EXPECTED}" "${actual}")
  message("updated ${EXPECTED}")
  return()
endif()
if(NOT EXISTS "${EXPECTED}")
  message(FATAL_ERROR "no expected summary ${EXPECTED}; run with SHARDLAB_UPDATE_EXPECTED=1 to create it")
endif()
file(READ "${EXPECTED}" expected)
if(NOT actual STREQUAL expected)
  message(FATAL_ERROR "summary of ${SCENARIO} differs from ${EXPECTED}\n--- expected\n${expected}\n--- actual\n${actual}\n"
                      "(SHARDLAB_UPDATE_EXPECTED=1 ctest -R <test> rewrites it after review)")
endif()
