# ipcfloor_add_strategy(NAME SOURCES file.c ...): builds NAME.so, a strategy `ipcfloor serve
# --strategy NAME.so` loads (include/ipcfloor/strategy.h). The module sees the strategy ABI's
# header only (ipcfloor::strategy), exports nothing but its entry point, and is compiled with
# -ffp-contract=off, so no multiply-add is fused that a reference computes in two roundings.
# A project that chooses no optimisation (no CMAKE_BUILD_TYPE, no -O in CMAKE_C_FLAGS or
# CMAKE_CXX_FLAGS) gets -O2 for the module: a strategy runs once per bar and combo, and CMake's
# default of no flags at all leaves it about twice as slow. An explicit choice always wins: a
# build type, an -O in those flags, or the target's own target_compile_options (they come later).
function(ipcfloor_add_strategy name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES")
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "ipcfloor_add_strategy(${name}): give its SOURCES")
  endif()
  add_library(${name} MODULE ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE ipcfloor::strategy)
  target_compile_options(${name} PRIVATE -ffp-contract=off)
  string(REGEX MATCH "(^|[ \t])-O" optimisation_chosen " ${CMAKE_C_FLAGS} ${CMAKE_CXX_FLAGS}")
  if(NOT optimisation_chosen)
    # Only for the empty configuration: a multi-config generator's configurations and a single
    # one's build type carry their own flags.
    target_compile_options(${name} PRIVATE $<$<STREQUAL:$<CONFIG>,>:-O2>)
  endif()
  set_target_properties(${name} PROPERTIES PREFIX "" C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden
                                           VISIBILITY_INLINES_HIDDEN ON POSITION_INDEPENDENT_CODE ON)
endfunction()
