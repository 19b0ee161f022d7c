# Error messages (__FILE__) and debug information name a file by its place in the source tree:
# `from`/ becomes `to`/ on the compile lines of `target` (and of the areas above it, when PUBLIC).
# Where two maps match, the later one on the command line applies.
function(_cohort_map_files target scope from to)
  if(NOT to STREQUAL "")
    string(APPEND to "/")
  endif()
  target_compile_options(${target} ${scope}
                         $<$<COMPILE_LANGUAGE:CXX>:-ffile-prefix-map=${from}/=${to}>)
endfunction()

# cohort_add_area(<area> [USES <area>...] [HEADERS <dir>...] [SOURCES <dir>])
#
# One area of the library (Note [Layers the build enforces] in docs/design.md): the object library
# cohort_<area>, whose objects go into the one library, cohort. Its sources see two include roots
# made for it in the build folder, each holding links to its own folders only:
#   areas/<area>/include/cohort/<name> -> each HEADERS folder (default include/cohort/<area>),
#       public: the areas above it see them too;
#   areas/<area>/src/<area> -> SOURCES (default src/<area>), private: its sources include one
#       another by their path under src/ ("comm/shm/segment.hpp").
# The areas it USES are linked PUBLIC, so it sees their public roots and passes them on: an area
# sees its own headers and those of the areas below it, and a header of any other area is not
# found. Paths are relative to the top of the source tree.
function(cohort_add_area area)
  cmake_parse_arguments(arg "" "SOURCES" "USES;HEADERS" ${ARGN})
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "cohort_add_area(${area}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_HEADERS)
    set(arg_HEADERS include/cohort/${area})
  endif()
  if(NOT arg_SOURCES)
    set(arg_SOURCES src/${area})
  endif()
  set(target cohort_${area})
  set(root "${PROJECT_BINARY_DIR}/areas/${area}")
  add_library(${target} OBJECT)
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  cohort_set_warnings(${target})
  _cohort_map_files(${target} PRIVATE "${PROJECT_SOURCE_DIR}" "")  # the links' maps come after

  file(MAKE_DIRECTORY "${root}/include/cohort" "${root}/src")
  foreach(headers IN LISTS arg_HEADERS)
    get_filename_component(name "${headers}" NAME)
    file(CREATE_LINK "${PROJECT_SOURCE_DIR}/${headers}" "${root}/include/cohort/${name}" SYMBOLIC)
    _cohort_map_files(${target} PUBLIC "${root}/include/cohort/${name}" "${headers}")
  endforeach()
  file(CREATE_LINK "${PROJECT_SOURCE_DIR}/${arg_SOURCES}" "${root}/src/${area}" SYMBOLIC)
  _cohort_map_files(${target} PRIVATE "${root}/src/${area}" "${arg_SOURCES}")
  target_include_directories(${target} PUBLIC "${root}/include" PRIVATE "${root}/src")

  foreach(lower IN LISTS arg_USES)
    target_link_libraries(${target} PUBLIC cohort_${lower})
  endforeach()
  target_sources(cohort PRIVATE $<TARGET_OBJECTS:${target}>)
endfunction()
