# cmake -P script: install cohort, build the consumer against the installed package, run it.
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")

function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${name} failed (${result}):\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

run_step(install ${CMAKE_COMMAND} --install "${COHORT_BUILD_DIR}" --prefix "${prefix}")
run_step(configure ${CMAKE_COMMAND} -S "${CONSUMER_SOURCE_DIR}" -B "${WORK_DIR}/build"
         -G "${GENERATOR}" -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run_step(build ${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run_step(run "${WORK_DIR}/build/consumer")
if(NOT step_output MATCHES "cohort ${EXPECTED_VERSION}")
  message(FATAL_ERROR "the consumer printed the wrong version:\n${step_output}")
endif()
message(STATUS "${step_output}")
