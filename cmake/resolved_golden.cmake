# Compares `shardlab validate SCENARIO --print` (the scenario with every default filled in)
# with a stored expected file, so a change to what the scenario asks for shows in review.
#   cmake -DEXE=shardlab -DSCENARIO=file.yaml -DEXPECTED=expected.resolved.yaml -P resolved_golden.cmake
# SHARDLAB_UPDATE_EXPECTED=1 rewrites the expected file from this run instead.
execute_process(COMMAND "${EXE}" validate "${SCENARIO}" --print
                RESULT_VARIABLE code OUTPUT_VARIABLE actual ERROR_VARIABLE err)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "shardlab validate ${SCENARIO} --print exited ${code}: ${err}")
endif()
include(${CMAKE_CURRENT_LIST_DIR}/golden_compare.cmake)
shardlab_golden("${actual}" "${EXPECTED}" "the resolved ${SCENARIO}")
