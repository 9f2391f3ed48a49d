// The attention mask as a policy: which key blocks a query tile visits, which of those need
// element-wise masking, and the element-wise mask itself. Causal and sliding window are one
// windowed mask aligned bottom-right: row r sees keys c with
//   r + (seqlen_k - seqlen_q) - window_left <= c <= r + (seqlen_k - seqlen_q) + window_right,
// (-1 = unbounded), always c < seqlen_k.
#pragma once

#include <cute/tensor.hpp>

#include "kernels/common/device_utils.hpp"

namespace hopattn::kernels::fwd {

template <int kBlockM, int kBlockN>
struct WindowMask {
  int seqlen_q, seqlen_k, window_left, window_right;

  // Key blocks [n_begin, n_end) that hold at least one visible key for query block m_block.
  __device__ __forceinline__ void block_range(int m_block, int& n_begin, int& n_end) const {
    const int shift = seqlen_k - seqlen_q;
    int n_max = (seqlen_k + kBlockN - 1) / kBlockN;
    if (window_right >= 0) {
      const int last_col = min(seqlen_k - 1, (m_block + 1) * kBlockM - 1 + shift + window_right);
      n_max = min(n_max, last_col < 0 ? 0 : last_col / kBlockN + 1);
    }
    int n_min = 0;
    if (window_left >= 0) {
      const int first_col = m_block * kBlockM + shift - window_left;
      n_min = first_col <= 0 ? 0 : first_col / kBlockN;
    }
    n_begin = n_min;
    n_end = n_max;
  }

  // True when some (row, col) of the tile is masked out (so the tile pays for masking).
  __device__ __forceinline__ bool block_needs_mask(int m_block, int n_block) const {
    const int shift = seqlen_k - seqlen_q;
    const int col_hi = (n_block + 1) * kBlockN - 1;
    const int col_lo = n_block * kBlockN;
    if (col_hi >= seqlen_k) return true;
    if (window_right >= 0 && col_hi > m_block * kBlockM + shift + window_right) return true;
    if (window_left >= 0 && col_lo < (m_block + 1) * kBlockM - 1 + shift - window_left) return true;
    return false;
  }

  // True when the 64 rows of consumer warpgroup wg in query block m_block see none of the keys
  // of key block n_block from its column `first_hidden` on (past seqlen_k or right of the
  // window): the warpgroup may run the block narrow (FwdTraits::kNarrowFirstBlock). Rows past
  // seqlen_q do not count.
  __device__ __forceinline__ bool keys_hidden_from(int m_block, int wg, int n_block, int first_hidden) const {
    const int last_row = min(m_block * kBlockM + wg * 64 + 63, seqlen_q - 1);
    int last_col = seqlen_k - 1;
    if (window_right >= 0) last_col = min(last_col, last_row + seqlen_k - seqlen_q + window_right);
    return last_col < n_block * kBlockN + first_hidden;
  }

  // Sets masked scores to -inf. s_rc and coord_rc are the (rows, cols) views of the score
  // accumulator and of the identity tensor partitioned like it (tile-local coordinates).
  // kRelativeBounds: a thread's columns in a row are its first column plus compile-time offsets,
  // so the bounds are made relative to that column once per row (opaque_int keeps them there)
  // and each element costs a compare against an immediate and a select (two compares with a
  // left window bound), where absolute columns cost an add per column and two compares per
  // element: +2..4% on masked blocks (perf-log, session 22). It costs a few registers, so the
  // traits choose it per kernel (FwdTraits::kRelativeMaskBounds).
  template <bool kRelativeBounds, class TensorS, class TensorC>
  __device__ __forceinline__ void apply(TensorS& s_rc, const TensorC& coord_rc, int m_block,
                                        int n_block) const {
    using namespace cute;
    const int shift = seqlen_k - seqlen_q;
    const int row0 = m_block * kBlockM;
    const int col0 = n_block * kBlockN;
    if constexpr (kRelativeBounds) {
      if (window_left < 0) apply_relative<false>(s_rc, coord_rc, row0, col0, shift);
      else apply_relative<true>(s_rc, coord_rc, row0, col0, shift);
    } else {
      CUTE_UNROLL
      for (int i = 0; i < size<0>(s_rc); ++i) {
        const int row = row0 + get<0>(coord_rc(i, 0));
        int hi = seqlen_k;  // exclusive
        if (window_right >= 0) hi = min(hi, row + shift + window_right + 1);
        const int lo = window_left >= 0 ? row + shift - window_left : 0;  // inclusive
        CUTE_UNROLL
        for (int j = 0; j < size<1>(s_rc); ++j) {
          const int col = col0 + get<1>(coord_rc(i, j));
          if (col >= hi || col < lo) s_rc(i, j) = -INFINITY;
        }
      }
    }
  }

 private:
  // apply's relative form; kLeftBound: the window has a left bound (a second compare per score).
  template <bool kLeftBound, class TensorS, class TensorC>
  __device__ __forceinline__ void apply_relative(TensorS& s_rc, const TensorC& coord_rc, int row0, int col0,
                                                 int shift) const {
    using namespace cute;
    CUTE_UNROLL
    for (int i = 0; i < size<0>(s_rc); ++i) {
      const int row = row0 + get<0>(coord_rc(i, 0));
      const int first = get<1>(coord_rc(i, 0));
      int hi = seqlen_k;  // exclusive
      if (window_right >= 0) hi = min(hi, row + shift + window_right + 1);
      const int hi_rel = opaque_int(hi - col0 - first);
      const int lo_rel = kLeftBound ? opaque_int(row + shift - window_left - col0 - first) : 0;  // inclusive
      CUTE_UNROLL
      for (int j = 0; j < size<1>(s_rc); ++j) {
        const int c = get<1>(coord_rc(i, j)) - first;  // a compile-time constant
        if (c >= hi_rel || (kLeftBound && c < lo_rel)) s_rc(i, j) = -INFINITY;
      }
    }
  }
};

}  // namespace hopattn::kernels::fwd
