# ipcfloor_add_strategy(NAME SOURCES file.c ...): builds NAME.so, a strategy `ipcfloor serve
# --strategy NAME.so` loads (include/ipcfloor/strategy.h). The module sees the strategy ABI's
# header only (ipcfloor::strategy), exports nothing but its entry point, and is compiled with
# -ffp-contract=off, so no multiply-add is fused that a reference computes in two roundings.
function(ipcfloor_add_strategy name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES")
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "ipcfloor_add_strategy(${name}): give its SOURCES")
  endif()
  add_library(${name} MODULE ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE ipcfloor::strategy)
  target_compile_options(${name} PRIVATE -ffp-contract=off)
  set_target_properties(${name} PROPERTIES PREFIX "" C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden
                                           VISIBILITY_INLINES_HIDDEN ON POSITION_INDEPENDENT_CODE ON)
endfunction()
