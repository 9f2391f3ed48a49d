// What the API layer hands a forward kernel's launcher: plain pointers, element strides and
// sizes, with every option already validated and resolved. Host-side (launchers turn it
// into TMA descriptors and kernel parameters; the backward kernels also keep Strides3).
#pragma once

#include <cstddef>
#include <cstdint>

namespace hopattn::kernels {

struct Strides3 {  // in elements; batch stride is 0 for varlen (rows index the packed dim)
  int64_t batch = 0, row = 0, head = 0;
};

// Sizes, lengths and options that every attention launch (forward and backward) needs.
struct ProblemArgs {
  int batch = 0, seqlen_q = 0, seqlen_k = 0;  // varlen: number of sequences, max lengths
  int total_q = 0, total_k = 0;               // rows of the packed q and k (dense: batch*seqlen)
  int nheads = 0, nheads_k = 0, head_dim = 0;
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  const int32_t* seqused_q = nullptr;
  const int32_t* seqused_k = nullptr;

  float softmax_scale = 1.f;
  float softcap = 0.f;
  int window_left = -1, window_right = -1;  // -1 unbounded; causal folded in as right = 0

  int num_sms = 132;

  bool varlen() const { return cu_seqlens_q != nullptr; }
  bool has_window() const { return window_left >= 0 || window_right >= 0; }
};

struct FwdArgs : ProblemArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // may be null
  Strides3 q_stride, k_stride, v_stride, out_stride;
  int64_t lse_batch_stride = 0, lse_head_stride = 0;  // row stride is 1

  // FP8 (e4m3) inputs: descales (null = 1) and the output dtype; see fwd/fp8_scales.hpp.
  const float* q_descale = nullptr;
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
  const float* q_block_descale = nullptr;  // (batch, nheads, q_num_blocks)
  const float* k_block_descale = nullptr;  // (batch, nheads_k, kv_num_blocks)
  const float* v_block_descale = nullptr;
  int q_block_rows = 0, q_num_blocks = 0, kv_block_rows = 0, kv_num_blocks = 0;
  bool out_fp16 = false;

  // Ablation switches (benchmarks only): see docs/design/fwd.md. (Disabling intra-warpgroup
  // overlap selects another kernel in the registry; it is not a launch argument.)
  bool disable_pingpong = false;
  bool disable_lpt = false;
  bool disable_cluster = false;  // FwdTuning::disable_cluster
  int l2_section_pairs = 0;  // experiments: > 0 overrides the L2 section size (fwd/tile_scheduler.hpp)
};

}  // namespace hopattn::kernels
