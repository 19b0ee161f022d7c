# Compile settings for cohort's own targets: cohort_set_warnings(<target>) sets warnings (as
# errors) for C++ and CUDA, and the C++20 dialect for CUDA sources (cohort_set_cuda_dialect).

# The C++20 dialect for a target's CUDA sources, on every target that carries cxx_std_20 where
# CUDA is on (the library target too, which has no sources of its own: a module linking it, as the
# Python package's does, otherwise fails CMake's generate step over it).
function(cohort_set_cuda_dialect target)
  if(COHORT_WITH_CUDA AND NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    # CMake 3.25 knows no C++20 dialect for nvcc and refuses the CUDA20 that cxx_std_20 implies
    # for CUDA sources. Standard 17 with extensions, not required, is nvcc's default, for which
    # CMake passes no -std; the -std=c++20 below is then the only one.
    set_target_properties(${target} PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED OFF
                                               CUDA_EXTENSIONS ON)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)
  endif()
endfunction()

function(cohort_set_warnings target)
  cohort_set_cuda_dialect(${target})
  set(_cxx -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
           -Wunused -Woverloaded-virtual -Wconversion -Wsign-conversion -Wnull-dereference
           -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
  set(_cuda -Xcompiler=-Wall,-Wextra --Wreorder --Wno-deprecated-gpu-targets)
  if(COHORT_WARNINGS_AS_ERRORS)
    list(APPEND _cxx -Werror)
    list(APPEND _cuda -Werror=all-warnings -Xcompiler=-Werror)
  endif()
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${_cxx}>
    $<$<COMPILE_LANGUAGE:CUDA>:${_cuda}>)
endfunction()
