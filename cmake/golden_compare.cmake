# Included by the golden scripts (scenario_golden.cmake, resolved_golden.cmake):
# shardlab_golden(ACTUAL EXPECTED WHAT) compares the text ACTUAL with the file EXPECTED and
# fails naming WHAT and both texts; with the environment variable SHARDLAB_UPDATE_EXPECTED=1
# it rewrites EXPECTED from ACTUAL instead (review the diff before committing it).
function(shardlab_golden actual expected what)
  if("$ENV{SHARDLAB_UPDATE_EXPECTED}" STREQUAL "1")
    file(WRITE "${expected}" "${actual}")
    message("updated ${expected}")
    return()
  endif()
  if(NOT EXISTS "${expected}")
    message(FATAL_ERROR "no expected file ${expected}; run with SHARDLAB_UPDATE_EXPECTED=1 to create it")
  endif()
  file(READ "${expected}" stored)
  if(NOT actual STREQUAL stored)
    message(FATAL_ERROR "${what} differs from ${expected}\n--- expected\n${stored}\n--- actual\n${actual}\n"
                        "(SHARDLAB_UPDATE_EXPECTED=1 ctest -R <test> rewrites it after review)")
  endif()
endfunction()
