// What the API layer hands a backward kernel's launcher: plain pointers, element strides and
// sizes, every option validated and resolved. Host-side only.
#pragma once

#include <cstdint>

#include "kernels/fwd_args.hpp"

namespace hopattn::kernels {

struct BwdArgs {
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
  bool deterministic = false;
  int num_sms = 132;

  bool varlen() const { return cu_seqlens_q != nullptr; }
};

}  // namespace hopattn::kernels
