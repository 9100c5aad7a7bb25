# Writes the shardlab version (`git describe --always --dirty` of the source tree, or
# "unknown" outside a git checkout) into a C++ source; run at every build by the
# shardlab_version target, the file changes (and recompiles) only when the version does.
#   cmake -DSRC=source_dir -DIN=version.cc.in -DOUT=version.cc -P version.cmake
find_package(Git QUIET)
set(SHARDLAB_VERSION "unknown")
if(GIT_FOUND)
  execute_process(COMMAND "${GIT_EXECUTABLE}" describe --always --dirty --tags
                  WORKING_DIRECTORY "${SRC}" RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_QUIET
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(code EQUAL 0 AND NOT out STREQUAL "")
    set(SHARDLAB_VERSION "${out}")
  endif()
endif()
configure_file("${IN}" "${OUT}" @ONLY)
