// Kernel parameters of the forward kernel (passed as a __grid_constant__ struct) and the
// per-sequence view of a (possibly variable-length) batch entry.
#pragma once

#include <cstdint>

#include "kernels/fwd/tile_scheduler.hpp"

namespace hopattn::kernels::fwd {

template <class Traits>
struct FwdKernelParams {
  using Element = typename Traits::Element;
  typename Traits::TmaQ tma_q;
  typename Traits::TmaKV tma_k, tma_v;
  typename Traits::GmemShape shape_q, shape_k;  // (rows, head_dim, heads, batch) as TMA sees them
  typename Traits::Output::TmaO tma_o{};  // the TMA store of O (built only when Output::kStaged)
  // cluster_kv: the CTAs run in pairs (2-CTA clusters), both on the same (head, batch) and keys,
  // each on one query block of a pair of adjacent ones; each loads half of every K and V block and
  // multicasts it to both (producer.hpp).
  bool cluster_kv{};
  typename Traits::TmaKVMulticast tma_k_mc{}, tma_v_mc{};  // built only when cluster_kv

  void* out{};  // Element for 16-bit inputs; bf16 or fp16 (out_fp16) for FP8 inputs
  int64_t out_row_stride{}, out_head_stride{}, out_batch_stride{};
  float* lse{};  // may be null
  int64_t lse_head_stride{}, lse_batch_stride{};

  int batch{}, seqlen_q{}, seqlen_k{}, nheads{}, head_group{};  // head_group = nheads / nheads_k
  const int32_t* cu_seqlens_q{};
  const int32_t* cu_seqlens_k{};
  const int32_t* seqused_q{};
  const int32_t* seqused_k{};

  float scale_log2{};       // multiplies raw scores before exp2 (softmax_scale or softcap, * log2 e)
  float softcap_prescale{};  // softmax_scale / softcap, used only when use_softcap
  bool use_softcap{};
  int window_left{}, window_right{};  // -1 = unbounded; causal is window_right = 0

  // FP8 only (fp8_scales.hpp): per-(batch, kv head) descales, (batch, nheads_k) float32, and
  // block descales: q (batch, nheads, q_num_blocks), k and v (batch, nheads_k, kv_num_blocks),
  // contiguous; each may be null (= 1).
  const float* q_descale{};
  const float* k_descale{};
  const float* v_descale{};
  const float* q_block_descale{};
  const float* k_block_descale{};
  const float* v_block_descale{};
  int q_block_rows = 1, q_num_blocks = 0, kv_num_blocks = 0;
  int kv_key_tiles_per_block = 1;  // kv block rows / the kernel's key tile
  // Q and K as stored (strides in elements), read only to recompute a block's scores in the
  // rare case OnlineSoftmax::lift_offsets cannot handle (max-free blocks, T::kMaxFreeBlocks).
  const typename Traits::Element* q_raw{};
  const typename Traits::Element* k_raw{};
  int64_t q_row_stride{}, q_head_stride{}, q_batch_stride{};
  int64_t k_row_stride{}, k_head_stride{}, k_batch_stride{};
  // Bytes from a row to the row 8 further on (the recompute's warp MMAs: query rows g and g + 8,
  // keys of consecutive 8-key chunks), read from the parameters where used so that they hold no
  // register through the mainloop.
  int64_t q_rows8_bytes{}, k_rows8_bytes{};
  bool out_fp16{};

  bool pingpong{};
  // Tile scheduler (see tile_scheduler.hpp).
  int num_m_blocks{}, num_tiles{}, heads_per_l2_section{};
  bool longest_first{};
  int* tile_counter{};  // workspace, zeroed before each launch
  TileDivisors tile_divisors{};  // TileScheduler::decode's, from the fields above
  int total_q{}, total_k{};  // rows of the packed q and k: bounds for untrusted device lengths
  // Always 0, which ptxas cannot know: the predicate of a never-executed store that keeps the
  // softmax above the wait for P V (Consumer::keep_above_wgmma_wait).
  int opaque_zero{};
};

// Where one batch entry's rows live and how long it is (packed row offsets for varlen).
struct SeqInfo {
  int q_offset = 0, k_offset = 0;  // first packed row (varlen) or 0 (dense: batch index selects)
  int seqlen_q = 0, seqlen_k = 0;
};

template <class Params>
__device__ __forceinline__ SeqInfo seq_info(const Params& p, int batch) {
  SeqInfo s;
  if (p.cu_seqlens_q != nullptr) {
    s.q_offset = p.cu_seqlens_q[batch];
    s.k_offset = p.cu_seqlens_k[batch];
    s.seqlen_q = p.cu_seqlens_q[batch + 1] - s.q_offset;
    s.seqlen_k = p.cu_seqlens_k[batch + 1] - s.k_offset;
  } else {
    s.seqlen_q = p.seqlen_q;
    s.seqlen_k = p.seqlen_k;
  }
  // Device-side lengths cannot be validated on the host without a synchronisation; clamp them
  // so that a wrong value can never make the kernel read or write outside the tensors.
  if (p.seqused_q != nullptr) s.seqlen_q = min(s.seqlen_q, p.seqused_q[batch]);
  if (p.seqused_k != nullptr) s.seqlen_k = min(s.seqlen_k, p.seqused_k[batch]);
  s.q_offset = max(0, min(s.q_offset, p.total_q));
  s.k_offset = max(0, min(s.k_offset, p.total_k));
  s.seqlen_q = max(0, min(s.seqlen_q, p.total_q - s.q_offset));
  s.seqlen_k = max(0, min(s.seqlen_k, p.total_k - s.k_offset));
  return s;
}

}  // namespace hopattn::kernels::fwd
