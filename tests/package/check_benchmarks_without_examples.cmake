# cmake -P script: configures cohort with the examples off and the benchmarks on (configure only,
# nothing is compiled) and reads the compile commands: the benchmarks built on the workloads
# library (scaling_bench, checkpoint_bench's --gpu) must be there, not silently left out.
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${WORK_DIR}")
set(arguments -S "${SOURCE_DIR}" -B "${WORK_DIR}" -G "${GENERATOR}"
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCOHORT_WITH_CUDA=${WITH_CUDA}
    -DCOHORT_BUILD_EXAMPLES=OFF -DCOHORT_BUILD_TESTS=OFF -DCOHORT_BUILD_BENCHMARKS=ON)
if(WITH_CUDA)
  string(REPLACE "," ";" CUDA_ARCHITECTURES "${CUDA_ARCHITECTURES}")
  list(APPEND arguments -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}
       "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} ${arguments}
                RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "configuring with COHORT_BUILD_EXAMPLES=OFF failed (${result}):\n${out}\n${err}")
endif()

file(READ "${WORK_DIR}/compile_commands.json" commands)
string(JSON count LENGTH "${commands}")
math(EXPR last "${count} - 1")
set(found "")
foreach(i RANGE ${last})
  string(JSON file GET "${commands}" ${i} file)
  string(JSON command GET "${commands}" ${i} command)
  foreach(source benchmarks/scaling_bench.cpp benchmarks/checkpoint_bench.cpp workloads/src/math.cpp)
    if(file STREQUAL "${SOURCE_DIR}/${source}")
      list(APPEND found ${source})
      if(source STREQUAL "benchmarks/checkpoint_bench.cpp"
         AND command MATCHES "-DCOHORT_CHECKPOINT_BENCH_GPU=1")
        list(APPEND found "checkpoint_bench --gpu")
      endif()
    endif()
  endforeach()
endforeach()

set(expected benchmarks/scaling_bench.cpp benchmarks/checkpoint_bench.cpp workloads/src/math.cpp)
if(WITH_CUDA)
  list(APPEND expected "checkpoint_bench --gpu")
endif()
foreach(item IN LISTS expected)
  if(NOT item IN_LIST found)
    message(FATAL_ERROR "with COHORT_BUILD_EXAMPLES=OFF the build has no ${item}: the benchmarks "
                        "that run on cohort_workloads must not depend on the examples")
  endif()
endforeach()
message(STATUS "with the examples off the build has: ${found}")
