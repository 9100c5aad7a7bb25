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
include(${CMAKE_CURRENT_LIST_DIR}/golden_compare.cmake)
shardlab_golden("${actual}" "${EXPECTED}" "summary of ${SCENARIO}")
