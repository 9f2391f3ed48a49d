# The one list of kernel instantiations compiled into the library: one forward kernel per
# (16-bit dtype, head dim) in HOPATTN_DTYPES x HOPATTN_HEAD_DIMS (more at d96 and d128: see the
# list of variants below), one backward kernel per
# (dtype, head dim) plus a dense one, and with HOPATTN_FP8 one e4m3 forward kernel per head dim 64, 128, 256 (two at d64). Each gets its own generated
# translation unit (parallel builds, per-file compile stats); registry.cpp lists them for the
# dispatcher. Tile shapes live in src/kernels/fwd/tile_table.hpp.
set(_gen "${CMAKE_CURRENT_BINARY_DIR}/kernels")
# Tile experiments: HOPATTN_TILE_OVERRIDES="128:128,192,2;64:128,128,2,0" (head dim: M,N,stages[,overlap]).
set(HOPATTN_TILE_OVERRIDES "" CACHE STRING "Tile-table overrides for experiments, e.g. 128:128,192,2")
set(HOPATTN_TILE_DEFINES "")
foreach(_ov IN LISTS HOPATTN_TILE_OVERRIDES)
  string(REPLACE ":" ";" _parts "${_ov}")
  list(GET _parts 0 _hd)
  list(GET _parts 1 _dims)
  string(REPLACE "," ";" _mns "${_dims}")
  list(GET _mns 0 _m)
  list(GET _mns 1 _n)
  list(GET _mns 2 _s)
  set(_o 1)
  list(LENGTH _mns _len)
  if(_len GREATER 3)
    list(GET _mns 3 _o)
  endif()
  list(APPEND HOPATTN_TILE_DEFINES HOPATTN_TILE_HD${_hd}_M=${_m} HOPATTN_TILE_HD${_hd}_N=${_n}
       HOPATTN_TILE_HD${_hd}_S=${_s} HOPATTN_TILE_HD${_hd}_O=${_o})
  message(STATUS "hopattn: tile override for head dim ${_hd}: ${_dims}")
endforeach()
# A head dim may get more forward kernels than its default one (FwdKernelUse in registry.hpp):
# * "staged" (kShortKeys): 128-key tiles, O through shared memory and a TMA store
#   (fwd/output_tile.hpp), preferred up to _short_max_keys_HD keys. Measured on an H200
#   (docs/perf-log.md, session 5): +3..17% at d128 512-2k, +1..7% at d96 512-1k, but 1-5% slower
#   at long sequences, where ptxas moved the mainloop's stage arithmetic out of uniform registers.
#   Session 29 found why (a branch on a warpgroup index ptxas could not prove warp-uniform,
#   epilogue.hpp) and fixed it: d128 +3..4% at 512-2k; against the default kernels (H100) d128
#   +6% at 2k, +4% at 4k, equal at 8k-16k; d96 +0.5..1% at 1k-2k, equal at 4k-8k. Hence the
#   limits. d64 (three consumer warpgroups, then 192x96 tiles) lost everywhere; d192/d256 have no
#   shared memory for the buffer.
# * "masked" (kMasked): 128 x 128 tiles with register stores, for problems past the short limit
#   whose mask hides much (a left window, or causal with seqlen_q >= seqlen_k / 2: plan.cpp), up to
#   _masked_max_keys_HD keys (0: any length).
#   d128: its default kernel has 176-key tiles, +2..5% at long unmasked sequences and +1..2% on
#   causal chunked prefill, but 3-5% slower under a full causal mask (session 6).
#   d64: its default kernel has 192 x 128 tiles with three consumer warpgroups; under a causal
#   mask at 512-1k keys, where most tiles hold a diagonal block, two warpgroups with 240 registers
#   each measured +8..12% (session 6), and lost 4-13% everywhere else.
# Backward "dense" kernels (BwdKernel::dense; src/kernels/bwd/tile_table.hpp, DenseBwdTraits): the
# general kernel with the mask and softcap code compiled out, for problems is_dense_bwd_problem
# accepts (bwd_args.hpp). Against the general kernel on dense paper-grid problems (H100, perf-log
# session 46): d128 +1.6 / 2.3 / 2.9 / 4.0 / 3.1% at 1k / 2k / 4k / 8k / 16k (and +4.1 / 4.3% at
# 2k / 8k in a second call), d64 +1.8 / 2.1% at 1k / 16k, d256 +0.6 / 1.4% at 1k / 16k; session 47:
# d96 +2.0 / 3.0 / 1.6% at 1k / 4k / 16k, d192 +0.1 / 2.6 / 1.6%. Every head dim has one.
# At d192 and d256 each backward instance (dense or not) also holds the stored-dS main kernel
# and the dQ kernel that reads it (src/kernels/bwd/stored_ds.hpp; launch.hpp picks them at run
# time by stored_ds_rule.hpp): two more kernels per wide instance, no entry of their own.
set(_short_max_keys_96 2048)
set(_short_max_keys_128 4096)
set(_masked_max_keys_64 1024)
set(_masked_max_keys_128 0)
file(MAKE_DIRECTORY "${_gen}")
set(HOPATTN_KERNEL_SOURCES "")
set(DECLS "")
set(ENTRIES "")
set(BWD_DECLS "")
set(BWD_ENTRIES "")
foreach(DTYPE IN LISTS HOPATTN_DTYPES)
  if(DTYPE STREQUAL "bf16")
    set(ELEMENT "cutlass::bfloat16_t")
    set(DTYPE_ENUM "kBFloat16")
  elseif(DTYPE STREQUAL "fp16")
    set(ELEMENT "cutlass::half_t")
    set(DTYPE_ENUM "kFloat16")
  else()
    message(FATAL_ERROR "HOPATTN_DTYPES: unknown dtype '${DTYPE}' (bf16, fp16)")
  endif()
  foreach(HDIM IN LISTS HOPATTN_HEAD_DIMS)
    if(NOT HDIM MATCHES "^(64|96|128|192|256)$")
      message(FATAL_ERROR "HOPATTN_HEAD_DIMS: unsupported head dim '${HDIM}'")
    endif()
    set(_variants "overlap")
    if(DTYPE STREQUAL "bf16" AND HDIM STREQUAL "128")
      list(APPEND _variants "no_overlap" "no_ws")  # the ablation kernels of the paper's Table 2
    endif()
    if(DEFINED _short_max_keys_${HDIM})
      list(APPEND _variants "staged")
    endif()
    if(DEFINED _masked_max_keys_${HDIM})
      list(APPEND _variants "masked")
    endif()
    foreach(_variant IN LISTS _variants)
      set(OVERLAP "true")   # the tile table may still turn overlap off for a head dim
      set(ABLATION "kNone")
      set(SUFFIX "_${_variant}")
      set(USE "kDefault")
      set(MAX_KEYS 0)
      if(_variant STREQUAL "overlap")
        set(SUFFIX "")
      elseif(_variant STREQUAL "staged")
        set(USE "kShortKeys")
        set(MAX_KEYS ${_short_max_keys_${HDIM}})
      elseif(_variant STREQUAL "masked")
        set(USE "kMasked")
        set(MAX_KEYS ${_masked_max_keys_${HDIM}})
      elseif(_variant STREQUAL "no_overlap")
        set(OVERLAP "false")
        set(ABLATION "kNoIntraWgOverlap")
      else()
        set(ABLATION "kNoWarpSpecialization")
      endif()
      set(TRAITS "fwd::DefaultFwdTraits<${ELEMENT}, ${HDIM}, ${OVERLAP}, FwdKernelUse::${USE}>")
      if(_variant STREQUAL "no_ws")
        set(TRAITS "fwd::NoWarpSpecializationFwdTraits<${ELEMENT}, ${HDIM}>")
      endif()
      set(_src "${_gen}/fwd_${DTYPE}_hd${HDIM}${SUFFIX}.cu")
      configure_file("${CMAKE_CURRENT_SOURCE_DIR}/kernels/fwd/instance.cu.in" "${_src}" @ONLY)
      list(APPEND HOPATTN_KERNEL_SOURCES "${_src}")
      string(APPEND DECLS "extern const FwdKernel kFwd_${DTYPE}_hd${HDIM}${SUFFIX};\n")
      string(APPEND ENTRIES "    kFwd_${DTYPE}_hd${HDIM}${SUFFIX},\n")
    endforeach()
    # Backward: one kernel per head dim (src/kernels/bwd/tile_table.hpp picks its shape), and a
    # "dense" one (no mask or softcap code) for problems without them where it measured faster.
    if(NOT HOPATTN_BWD)
      continue()
    endif()
    foreach(_variant IN ITEMS general dense)
      set(DENSE "false")
      set(SUFFIX "")
      if(_variant STREQUAL "dense")
        set(DENSE "true")
        set(SUFFIX "_dense")
      endif()
      set(_src "${_gen}/bwd_${DTYPE}_hd${HDIM}${SUFFIX}.cu")
      configure_file("${CMAKE_CURRENT_SOURCE_DIR}/kernels/bwd/instance.cu.in" "${_src}" @ONLY)
      list(APPEND HOPATTN_KERNEL_SOURCES "${_src}")
      string(APPEND BWD_DECLS "extern const BwdKernel kBwd_${DTYPE}_hd${HDIM}${SUFFIX};\n")
      string(APPEND BWD_ENTRIES "    kBwd_${DTYPE}_hd${HDIM}${SUFFIX},\n")
    endforeach()
  endforeach()
endforeach()
# FP8 forward: e4m3 inputs, bf16/fp16 output chosen at run time (one kernel per head dim; d64
# also a "masked" one: its default kernel has 192 x 128 tiles with three consumer warpgroups,
# which lose 5-7% under a causal mask at 512-1k keys to the two-warpgroup 128 x 128 kernel,
# session 22; the same split as the 16-bit d64).
set(_fp8_masked_max_keys_64 1024)
# ... and at d128 a "staged" one (kShortKeys, 128 x 128 like the default, O through shared memory
# and a TMA store) up to 4096 keys: +1.2..1.8% at 512-2k, +4% causal 1k, equal at 4k, -0.6% at 8k
# (H100, session 29). d256's only kernel stages O in its V^T ring (tile_table.hpp).
set(_fp8_short_max_keys_128 4096)
if(HOPATTN_FP8)
  foreach(HDIM IN LISTS HOPATTN_HEAD_DIMS)
    if(NOT HDIM MATCHES "^(64|128|256)$")
      continue()
    endif()
    set(DTYPE "e4m3")
    set(DTYPE_ENUM "kFloat8E4M3")
    set(ABLATION "kNone")
    set(_variants "default")
    if(DEFINED _fp8_masked_max_keys_${HDIM})
      list(APPEND _variants "masked")
    endif()
    if(DEFINED _fp8_short_max_keys_${HDIM})
      list(APPEND _variants "staged")
    endif()
    foreach(_variant IN LISTS _variants)
      if(_variant STREQUAL "masked")
        set(SUFFIX "_masked")
        set(USE "kMasked")
        set(MAX_KEYS ${_fp8_masked_max_keys_${HDIM}})
      elseif(_variant STREQUAL "staged")
        set(SUFFIX "_staged")
        set(USE "kShortKeys")
        set(MAX_KEYS ${_fp8_short_max_keys_${HDIM}})
      else()
        set(SUFFIX "")
        set(USE "kDefault")
        set(MAX_KEYS 0)
      endif()
      set(TRAITS "fwd::DefaultFwdFp8Traits<${HDIM}, FwdKernelUse::${USE}>")
      set(_src "${_gen}/fwd_e4m3_hd${HDIM}${SUFFIX}.cu")
      configure_file("${CMAKE_CURRENT_SOURCE_DIR}/kernels/fwd/instance.cu.in" "${_src}" @ONLY)
      list(APPEND HOPATTN_KERNEL_SOURCES "${_src}")
      string(APPEND DECLS "extern const FwdKernel kFwd_e4m3_hd${HDIM}${SUFFIX};\n")
      string(APPEND ENTRIES "    kFwd_e4m3_hd${HDIM}${SUFFIX},\n")
    endforeach()
  endforeach()
endif()
configure_file("${CMAKE_CURRENT_SOURCE_DIR}/kernels/registry.cpp.in" "${_gen}/registry.cpp" @ONLY)
list(APPEND HOPATTN_KERNEL_SOURCES "${_gen}/registry.cpp")
message(STATUS "hopattn: forward kernels for dtypes [${HOPATTN_DTYPES}] x head dims [${HOPATTN_HEAD_DIMS}]")
