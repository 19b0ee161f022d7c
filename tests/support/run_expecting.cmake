# cmake -P script: runs COMMAND (a ;-list) and passes only when it exits 0 and its output (standard
# output and error together) matches EXPECT. A ctest PASS_REGULAR_EXPRESSION would ignore the exit
# status, so a program that printed the right line and then crashed at teardown would pass.
if(NOT DEFINED COMMAND OR NOT DEFINED EXPECT)
  message(FATAL_ERROR "usage: cmake -DCOMMAND=<program;args...> -DEXPECT=<regex> -P run_expecting.cmake")
endif()
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE result OUTPUT_VARIABLE output
                ERROR_VARIABLE output)
message("${output}")
if(NOT result STREQUAL "0")
  message(FATAL_ERROR "'${COMMAND}' exited with ${result}")
endif()
if(NOT output MATCHES "${EXPECT}")
  message(FATAL_ERROR "'${COMMAND}' did not print a line matching '${EXPECT}'")
endif()
if(DEFINED REJECT AND output MATCHES "${REJECT}")
  message(FATAL_ERROR "'${COMMAND}' printed '${REJECT}'")
endif()
