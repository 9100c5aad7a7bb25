# cmake -DEXE=shardlab -DARGS=a;b -DDOC=docs/file.md -DREGENERATE="command" -P docs_current.cmake
# Fails unless the committed DOC equals what `EXE ARGS` prints now (a generated document
# gone stale), saying the command that regenerates it.
execute_process(COMMAND ${EXE} ${ARGS} RESULT_VARIABLE code OUTPUT_VARIABLE generated ERROR_VARIABLE err)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "'${EXE} ${ARGS}' exited ${code}:\n${err}")
endif()
if(NOT EXISTS "${DOC}")
  message(FATAL_ERROR "${DOC} is missing; create it with: ${REGENERATE}")
endif()
file(READ "${DOC}" committed)
string(REPLACE ";" " " args_shown "${ARGS}")
if(NOT committed STREQUAL generated)
  message(FATAL_ERROR "${DOC} is stale: it differs from what `shardlab ${args_shown}` prints now.\n"
                      "Regenerate it (from the repository root, after building) with:\n  ${REGENERATE}\n"
                      "and commit the result.")
endif()
message(STATUS "${DOC} is current")
