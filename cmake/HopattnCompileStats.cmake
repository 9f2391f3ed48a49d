# Every compile goes through tools/compile-stat (and ccache when present). The wrapper appends
# "<source>\t<seconds>\t<peak KiB>" to ${CMAKE_BINARY_DIR}/compile-stats.tsv; the target
# `compile-report` (and tools/compile-report) summarise it.
find_program(HOPATTN_CCACHE ccache)
set(_launcher "")
if(HOPATTN_COMPILE_STATS)
  list(APPEND _launcher "${PROJECT_SOURCE_DIR}/tools/compile-stat" "${CMAKE_BINARY_DIR}/compile-stats.tsv")
endif()
if(HOPATTN_CCACHE)
  list(APPEND _launcher "${HOPATTN_CCACHE}")
endif()
if(_launcher)
  list(JOIN _launcher " " _launcher_str)
  set_property(GLOBAL PROPERTY RULE_LAUNCH_COMPILE "${_launcher_str}")
endif()
add_custom_target(compile-report
  COMMAND "${PROJECT_SOURCE_DIR}/tools/compile-report" "${CMAKE_BINARY_DIR}/compile-stats.tsv"
  COMMENT "Compile seconds and peak memory per source")
