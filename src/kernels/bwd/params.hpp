// Kernel parameters of the backward kernels (passed as __grid_constant__ structs).
#pragma once

#include <cstdint>

#include "kernels/fwd/params.hpp"

namespace hopattn::kernels::bwd {

// What the pre- and postprocessing kernels and the main kernel all need: lengths (for
// fwd::seq_info) and the workspace arrays.
struct BwdCommonParams {
  int batch{}, seqlen_q{}, seqlen_k{}, nheads{}, nheads_k{}, head_group{};
  int total_q{}, total_k{};
  const int32_t* cu_seqlens_q{};
  const int32_t* cu_seqlens_k{};
  const int32_t* seqused_q{};
  const int32_t* seqused_k{};
  int64_t rows_per_head{}, seqlen_q_rounded{};  // workspace geometry (workspace.hpp)
  float* lse_log2{};
  float* dsum{};
  float* dq_accum{};
  int* dq_semaphore{};  // deterministic mode only, else null
  float softmax_scale{};
};

// Preprocess: reads O, dO and LSE, writes dsum and lse_log2.
template <class Element>
struct BwdPreParams : BwdCommonParams {
  const Element* out{};
  const Element* dout{};
  int64_t out_row_stride{}, out_head_stride{}, out_batch_stride{};
  int64_t dout_row_stride{}, dout_head_stride{}, dout_batch_stride{};
  const float* lse{};
  int64_t lse_head_stride{}, lse_batch_stride{};
};

// Postprocess: dq = softmax_scale * dq_accum in the input dtype.
template <class Element>
struct BwdPostParams : BwdCommonParams {
  Element* dq{};
  int64_t dq_row_stride{}, dq_head_stride{}, dq_batch_stride{};
};

// The TMA descriptors come first (a base placed at offset 0 of the kernel parameters), as in
// the forward kernel.
template <class Traits>
struct BwdTmaParams {
  typename Traits::TmaQ tma_q, tma_do;
  typename Traits::TmaK tma_k;
  typename Traits::TmaV tma_v;
};

template <class Traits>
struct BwdKernelParams : BwdTmaParams<Traits>, BwdCommonParams {
  using Element = typename Traits::Element;
  typename Traits::GmemShape shape_q, shape_k;

  Element* dk{};
  Element* dv{};
  int64_t dk_row_stride{}, dk_head_stride{}, dk_batch_stride{};
  int64_t dv_row_stride{}, dv_head_stride{}, dv_batch_stride{};

  float scale_log2{};        // as in the forward: (softcap or softmax_scale) * log2(e)
  float softcap_prescale{};  // softmax_scale / softcap
  bool use_softcap{};
  int window_left{}, window_right{};
  bool deterministic{};

  int num_n_blocks{}, num_tiles{}, heads_per_l2_section{};
  int* tile_counter{};
};

}  // namespace hopattn::kernels::bwd
