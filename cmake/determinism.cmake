# Same scenario + seed + build ⇒ byte-identical metrics.json and trace.json, whatever the
# host does: runs the scenario on one host core (taskset), on all of them, and on all of
# them with seeded random host yields between the simulated ranks, and compares the files.
#   cmake -DEXE=shardlab -DSCENARIO=file.yaml -DOUT=dir -DTASKSET=taskset -P determinism.cmake
if(NOT TASKSET)
  message(FATAL_ERROR "taskset (util-linux) not found: cannot run the one-core case")
endif()
file(REMOVE_RECURSE "${OUT}")
set(runs one_core all_cores perturbed)
set(cmd_all_cores "${EXE}" run "${SCENARIO}" --out "${OUT}/all_cores")
set(cmd_perturbed "${EXE}" run "${SCENARIO}" --out "${OUT}/perturbed" --perturb-host-schedule 20261203)
set(cmd_one_core "${TASKSET}" -c 0 "${EXE}" run "${SCENARIO}" --out "${OUT}/one_core")
foreach(run IN LISTS runs)
  execute_process(COMMAND ${cmd_${run}} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "${run}: shardlab run exited ${code}\n${out}${err}")
  endif()
endforeach()
list(GET runs 0 first)
foreach(run IN LISTS runs)
  foreach(f metrics.json trace.json summary.txt)
    execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${OUT}/${first}/${f}" "${OUT}/${run}/${f}"
                    RESULT_VARIABLE differ)
    if(differ)
      message(FATAL_ERROR "${f} of the ${run} run differs from the ${first} run's (nondeterminism)")
    endif()
  endforeach()
  message("${run}: metrics.json, trace.json and summary.txt identical to ${first}")
endforeach()
