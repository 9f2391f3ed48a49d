# Finds the CUTLASS/CuTe headers: HOPATTN_CUTLASS_DIR if given, else what tools/setup-deps
# installed under .deps/. Defines the interface target hopattn::cutlass.
if(NOT HOPATTN_CUTLASS_DIR)
  set(HOPATTN_CUTLASS_DIR "${PROJECT_SOURCE_DIR}/.deps/cutlass/include")
endif()
if(NOT EXISTS "${HOPATTN_CUTLASS_DIR}/cute/tensor.hpp")
  message(FATAL_ERROR
    "CUTLASS headers not found at HOPATTN_CUTLASS_DIR='${HOPATTN_CUTLASS_DIR}'.\n"
    "Run tools/setup-deps (installs nvidia-cutlass==4.2.0.0 into .deps/), or pass "
    "-DHOPATTN_CUTLASS_DIR=<cutlass>/include.")
endif()
message(STATUS "hopattn: CUTLASS headers from ${HOPATTN_CUTLASS_DIR}")
add_library(hopattn_cutlass INTERFACE)
add_library(hopattn::cutlass ALIAS hopattn_cutlass)
target_include_directories(hopattn_cutlass SYSTEM INTERFACE "${HOPATTN_CUTLASS_DIR}")
