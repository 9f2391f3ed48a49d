// Backward preprocessing, one CTA per (query block, head, batch entry), a warp per row:
//   dsum[row]     = sum_c dO[row, c] * O[row, c]     (FP32; D of the paper)
//   lse_log2[row] = LSE[row] * log2(e)               (so that P = exp2(S * scale_log2 - lse_log2))
// Rows without a visible key (forward LSE = -inf) and the padding rows of the last block get
// lse_log2 = +inf and dsum = 0: their P is exactly 0, so the main kernel needs no row mask.
#pragma once

#include <cuda_runtime.h>

#include "kernels/bwd/params.hpp"
#include "kernels/bwd/workspace.hpp"

namespace hopattn::kernels::bwd {

constexpr int kPreprocessThreads = 256;

template <class Element, int kHeadDim, int kBlockM>
__global__ void __launch_bounds__(kPreprocessThreads) bwd_preprocess_kernel(const __grid_constant__ BwdPreParams<Element> p) {
  const int m_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const fwd::SeqInfo si = fwd::seq_info(p, batch);
  if (m_block * kBlockM >= si.seqlen_q) return;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int64_t stats_base = head * p.rows_per_head +
                             padded_row_start<kBlockM>(varlen, batch, si.q_offset, p.seqlen_q_rounded);
  const Element* out = p.out + (varlen ? si.q_offset * p.out_row_stride : batch * p.out_batch_stride) +
                       head * p.out_head_stride;
  const Element* dout = p.dout + (varlen ? si.q_offset * p.dout_row_stride : batch * p.dout_batch_stride) +
                        head * p.dout_head_stride;
  const float* lse = p.lse + (varlen ? si.q_offset : batch * p.lse_batch_stride) + head * p.lse_head_stride;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int kWarps = kPreprocessThreads / 32;
  for (int r = warp; r < kBlockM; r += kWarps) {
    const int row = m_block * kBlockM + r;
    const bool valid = row < si.seqlen_q;
    float dot = 0.f;
    if (valid) {
      // Pairs of elements per 4-byte load; rows are 16-byte aligned (checked by the API).
      for (int c = 2 * lane; c < kHeadDim; c += 64) {
        const Element* o = out + row * p.out_row_stride + c;
        const Element* d = dout + row * p.dout_row_stride + c;
        dot += float(o[0]) * float(d[0]) + float(o[1]) * float(d[1]);
      }
    }
    for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffff, dot, off);
    if (lane == 0) {
      constexpr float kLog2e = 1.4426950408889634f;
      const float l = valid ? lse[row] : -INFINITY;
      p.dsum[stats_base + row] = valid ? dot : 0.f;
      p.lse_log2[stats_base + row] = l == -INFINITY ? INFINITY : l * kLog2e;
    }
  }
}

}  // namespace hopattn::kernels::bwd
