// What the API layer hands a backward kernel's launcher: plain pointers, element strides and
// sizes, every option validated and resolved. Host-side only.
#pragma once

#include <cstdint>

#include "kernels/fwd_args.hpp"

namespace hopattn::kernels {

struct BwdArgs : ProblemArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* out = nullptr;
  const void* dout = nullptr;
  const float* lse = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  Strides3 q_stride, k_stride, v_stride, out_stride, dout_stride, dq_stride, dk_stride, dv_stride;
  int64_t lse_batch_stride = 0, lse_head_stride = 0;  // row stride is 1
  bool deterministic = false;
  int32_t l2_section_pairs = 0;  // BwdTuning::l2_section_pairs
  int32_t lag_dq_min_steps = 0;  // BwdTuning::lag_dq_min_steps
  int32_t dq_convert_sms = 0;    // BwdTuning::dq_convert_sms
  int32_t split_tail_tiles = 0;  // BwdTuning::split_tail_tiles
  int32_t dq_from_stored_ds = 0;  // BwdTuning::dq_from_stored_ds
};

// The problems a dense backward kernel (BwdKernel::dense) takes: no causal or window mask, no
// softcap, fixed lengths (no cu_seqlens, no seqused) and keys in whole 128-key tiles. A key past
// seqlen_k needs the mask: its zero-filled K row scores 0, and exp2(0 - LSE) may overflow.
// Query rows past seqlen_q need nothing (the preprocess gives them LSE = +inf, so P = 0).
inline bool is_dense_bwd_problem(const ProblemArgs& a) {
  return !a.has_window() && a.softcap == 0.f && a.cu_seqlens_q == nullptr && a.cu_seqlens_k == nullptr &&
         a.seqused_q == nullptr && a.seqused_k == nullptr && a.seqlen_k > 0 && a.seqlen_k % 128 == 0;
}

}  // namespace hopattn::kernels
