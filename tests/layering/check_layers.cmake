# cmake -P script: each area's sources may include the headers of their own area and of the areas
# below it, and no other (Note [Layers the build enforces] in docs/design.md).
#
# For every case below it takes the compile command of one of the area's own sources from the
# build's compile_commands.json (so the flags are exactly those the area is built with), compiles
# a one-line probe with it instead (-fsyntax-only), and checks the outcome:
#   sees     the probe compiles (the command works, and the header is one the area may use);
#   refused  the compiler stops because it cannot find the header the case names.
# It also checks that no source of the library includes a file by a path that climbs out of its
# folder ("../"), which no include path can refuse.
#
# Arguments: SOURCE_DIR, BUILD_DIR, WORK_DIR.
cmake_minimum_required(VERSION 3.25)

# area | include line | "sees", or the header whose absence stops the compile
set(cases
  # core sees only itself.
  "core|<cohort/core/error.hpp>|sees"
  "core|<cohort/memory/buffer.hpp>|cohort/memory/buffer.hpp"
  "core|<cohort/launch/store.hpp>|cohort/launch/store.hpp"
  # memory and launch both sit on core, and neither sees the other.
  "memory|<cohort/core/stream.hpp>|sees"
  "memory|<cohort/launch/store.hpp>|cohort/launch/store.hpp"
  "memory|<cohort/ddp/data_parallel.hpp>|cohort/ddp/data_parallel.hpp"
  "launch|<cohort/launch/store_group.hpp>|sees"
  "launch|<cohort/memory/buffer.hpp>|cohort/memory/buffer.hpp"
  "launch|<cohort/comm/world.hpp>|cohort/comm/world.hpp"
  # An old flat detail/ name still compiles where its area is visible, and only there.
  "memory|<cohort/detail/nccl_check.hpp>|cohort/comm/detail/nccl_check.hpp"
  # comm: launch and memory below it; its own wings by their path under src/.
  "comm|<cohort/memory/buffer.hpp>|sees"
  "comm|\"comm/host/worker.hpp\"|sees"
  "comm|<cohort/kernels/launch.hpp>|cohort/kernels/launch.hpp"
  "comm|<cohort/ddp/data_parallel.hpp>|cohort/ddp/data_parallel.hpp"
  # kernels and data: core and memory, no communicator.
  "kernels|<cohort/memory/buffer.hpp>|sees"
  "kernels|<cohort/comm/world.hpp>|cohort/comm/world.hpp"
  "kernels|<cohort/optim/optimizer.hpp>|cohort/optim/optimizer.hpp"
  "data|<cohort/memory/memory_resource.hpp>|sees"
  "data|<cohort/comm/world.hpp>|cohort/comm/world.hpp"
  "data|<cohort/checkpoint/checkpoint.hpp>|cohort/checkpoint/checkpoint.hpp"
  # ddp: the old violation (its rank agreement used checkpoint's checksum, now core's).
  "ddp|<cohort/core/checksum.hpp>|sees"
  "ddp|<cohort/kernels/launch.hpp>|sees"
  "ddp|<cohort/checkpoint/checksum.hpp>|cohort/checkpoint/checksum.hpp"
  "ddp|<cohort/optim/optimizer.hpp>|cohort/optim/optimizer.hpp"
  "ddp|<cohort/data/distributed_sampler.hpp>|cohort/data/distributed_sampler.hpp"
  "ddp|\"comm/context.hpp\"|comm/context.hpp"
  "optim|<cohort/ddp/data_parallel.hpp>|sees"
  "optim|<cohort/checkpoint/checkpoint.hpp>|cohort/checkpoint/checkpoint.hpp"
  # checkpoint, the top, sees every public header, and no other area's private ones.
  "checkpoint|<cohort/optim/optimizer.hpp>|sees"
  "checkpoint|<cohort/data/distributed_sampler.hpp>|sees"
  "checkpoint|\"ddp/arena_ops.hpp\"|ddp/arena_ops.hpp")

set(commands_file "${BUILD_DIR}/compile_commands.json")
if(NOT EXISTS "${commands_file}")
  message(FATAL_ERROR "${commands_file} is missing: this check needs the build's compile commands "
                      "(CMAKE_EXPORT_COMPILE_COMMANDS, on in cohort's top-level builds, and a "
                      "Makefile or Ninja generator)")
endif()
file(READ "${commands_file}" commands)
string(JSON command_count LENGTH "${commands}")
math(EXPR last_command "${command_count} - 1")

# The folder of an area's own sources.
function(area_sources_dir area out)
  if(area STREQUAL "kernels")
    set(${out} "${SOURCE_DIR}/kernels/" PARENT_SCOPE)
  else()
    set(${out} "${SOURCE_DIR}/src/${area}/" PARENT_SCOPE)
  endif()
endfunction()

# The compile command of one C++ source of `area`, as a list of arguments, with the source, the
# object and the dependency file taken out; and the folder it runs in.
function(area_command area out_arguments out_directory)
  area_sources_dir(${area} sources_dir)
  foreach(i RANGE ${last_command})
    string(JSON file GET "${commands}" ${i} file)
    string(FIND "${file}" "${sources_dir}" at)
    if(NOT at EQUAL 0 OR NOT file MATCHES "\\.cpp$")
      continue()
    endif()
    string(JSON directory GET "${commands}" ${i} directory)
    string(JSON command ERROR_VARIABLE no_command GET "${commands}" ${i} command)
    if(no_command)
      message(FATAL_ERROR "compile_commands.json gives ${file} as \"arguments\"; this check reads "
                          "\"command\" (Makefile and Ninja generators)")
    endif()
    separate_arguments(words UNIX_COMMAND "${command}")
    set(arguments "")
    set(skip_next FALSE)
    foreach(word IN LISTS words)
      if(skip_next)
        set(skip_next FALSE)
      elseif(word MATCHES "^-(o|MF|MT|MQ)$")
        set(skip_next TRUE)
      elseif(word MATCHES "^-(c|MD|MMD)$" OR word STREQUAL file)
      else()
        list(APPEND arguments "${word}")
      endif()
    endforeach()
    set(${out_arguments} "${arguments}" PARENT_SCOPE)
    set(${out_directory} "${directory}" PARENT_SCOPE)
    return()
  endforeach()
  message(FATAL_ERROR "compile_commands.json has no C++ source under ${sources_dir}: is ${area} "
                      "still an area of the library?")
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(failures "")  # a text, not a list: compiler messages hold semicolons
set(failure_count 0)
set(index 0)
foreach(case IN LISTS cases)
  string(REPLACE "|" ";" fields "${case}")
  list(GET fields 0 area)
  list(GET fields 1 include)
  list(GET fields 2 expected)
  if(NOT DEFINED arguments_${area})
    area_command(${area} arguments_${area} directory_${area})
  endif()
  math(EXPR index "${index} + 1")
  set(probe "${WORK_DIR}/probe_${index}_${area}.cpp")
  file(WRITE "${probe}" "// ${area} probe: ${expected}\n#include ${include}\n")
  execute_process(COMMAND ${arguments_${area}} -fsyntax-only "${probe}"
                  WORKING_DIRECTORY "${directory_${area}}"
                  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(what "a source of ${area} including ${include}")
  if(expected STREQUAL "sees")
    if(NOT result EQUAL 0)
      string(APPEND failures "${what} must compile, but did not:\n${out}${err}\n")
      math(EXPR failure_count "${failure_count} + 1")
    else()
      message(STATUS "sees     ${what}")
    endif()
  elseif(result EQUAL 0)
    string(APPEND failures "${what} compiled, but ${area} must not see ${expected}: the layers "
                           "are not enforced\n\n")
    math(EXPR failure_count "${failure_count} + 1")
  else()
    # GCC: "fatal error: cohort/x.hpp: No such file or directory"; Clang: "'cohort/x.hpp' file not found".
    string(REGEX REPLACE "([][+.*^$()|?\\\\])" "\\\\\\1" expected_pattern "${expected}")
    if(err MATCHES "${expected_pattern}: No such file or directory"
       OR err MATCHES "'${expected_pattern}' file not found")
      message(STATUS "refused  ${what}")
    else()
      string(APPEND failures "${what} failed, but not for want of ${expected}:\n${out}${err}\n")
      math(EXPR failure_count "${failure_count} + 1")
    endif()
  endif()
endforeach()

# A path that climbs ("../") reaches any folder whatever the include paths are.
file(GLOB_RECURSE library_files LIST_DIRECTORIES false
     "${SOURCE_DIR}/src/*.cpp" "${SOURCE_DIR}/src/*.hpp" "${SOURCE_DIR}/src/*.cu"
     "${SOURCE_DIR}/kernels/*.cpp" "${SOURCE_DIR}/kernels/*.hpp" "${SOURCE_DIR}/kernels/*.cu"
     "${SOURCE_DIR}/include/*.hpp")
foreach(file IN LISTS library_files)
  file(STRINGS "${file}" climbing REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<][^\">]*\\.\\./")
  if(climbing)
    file(RELATIVE_PATH name "${SOURCE_DIR}" "${file}")
    string(APPEND failures "${name} includes by a path that climbs out of its folder: "
                           "${climbing} (include another area's header by its name under "
                           "cohort/, your own area's by its path under src/)\n\n")
    math(EXPR failure_count "${failure_count} + 1")
  endif()
endforeach()

if(failure_count GREATER 0)
  message("${failures}")
  message(FATAL_ERROR "${failure_count} layer check(s) failed (above)")
endif()
list(LENGTH cases case_count)
message(STATUS "${case_count} cases as the layers say; no include climbs out of its folder")
